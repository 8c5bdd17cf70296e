"""ddflow configuration: the TOML schema and its loader."""

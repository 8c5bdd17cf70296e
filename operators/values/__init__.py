"""Values: records interned to int64 ids, and memos of user functions over ids."""

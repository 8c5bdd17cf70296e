"""What every command shares: its exit codes, the error for bad input to it, and the environment
variables flags fall back to."""

from __future__ import annotations

__all__ = ["ENV", "EXIT_FAILURE", "EXIT_FENCED", "EXIT_OK", "EXIT_USAGE", "UsageError"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
# another instance took over this daemon's transactional.id: restarting this one would fence that one in
# turn, so supervisors are told not to (systemd: RestartPreventExitStatus=3)
EXIT_FENCED = 3

# flag -> environment variable it falls back to (named in some commands' messages)
ENV = {
    "config": "DDFLOW_CONFIG",
    "bootstrap": "KAFKA_BOOTSTRAP",
    "metrics_address": "DDFLOW_METRICS_ADDRESS",
    "log_level": "DDFLOW_LOG_LEVEL",
    "log_format": "DDFLOW_LOG_FORMAT",
    "broker_port": "DDFLOW_BROKER_PORT",
}


class UsageError(Exception):
    """Bad input to a command (a file, a line): reported without a traceback, exit 2."""

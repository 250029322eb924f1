"""Reusable wire code: subprocess line streams and environment composition."""

from seamline.transport.env import compose_env
from seamline.transport.subprocess import EndResult, LineProcess, group_members

__all__ = ["EndResult", "LineProcess", "compose_env", "group_members"]

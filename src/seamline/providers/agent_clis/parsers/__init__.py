"""Stream parsers for the agent CLIs: one per program (and route), fed line by line."""

from seamline.providers.agent_clis.parsers.base import StreamParser, classify_http_status
from seamline.providers.agent_clis.parsers.claude_code import ClaudeStreamJsonParser
from seamline.providers.agent_clis.parsers.codex import CodexJsonParser
from seamline.providers.agent_clis.parsers.gemini_cli import GeminiStreamJsonParser

__all__ = [
    "ClaudeStreamJsonParser",
    "CodexJsonParser",
    "GeminiStreamJsonParser",
    "StreamParser",
    "classify_http_status",
]

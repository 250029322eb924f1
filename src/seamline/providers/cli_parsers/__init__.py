"""Stream parsers for the agent CLIs: one per program (and route), fed line by line."""

from seamline.providers.cli_parsers.base import StreamParser, classify_http_status
from seamline.providers.cli_parsers.claude_code import ClaudeStreamJsonParser
from seamline.providers.cli_parsers.codex import CodexJsonParser
from seamline.providers.cli_parsers.gemini_cli import GeminiStreamJsonParser

__all__ = [
    "ClaudeStreamJsonParser",
    "CodexJsonParser",
    "GeminiStreamJsonParser",
    "StreamParser",
    "classify_http_status",
]

"""Agent CLIs: Claude Code, Codex and Gemini CLI run as programs that own their loop.

``base`` is :class:`~seamline.providers.agent_clis.base.AgentCliProvider` (one process per
turn, or a warm one), ``turn`` reads a turn's output, ``parsers`` turn each program's
stream into seamline's events, ``approvals`` answers the programs' permission hooks.
"""

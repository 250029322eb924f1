"""seamline as an Agent Client Protocol agent: ACP clients (Zed, JetBrains, Toad, any
``acp`` client, seamline's own ``acp`` provider) drive any seamline backend over stdio.

    seamline acp --provider scripted --provider-option script=demo.yaml

See ``docs/acp-agent.md``.
"""

from seamline.acp_agent.agent import AcpAgentSettings, SeamlineAcpAgent
from seamline.acp_agent.connection import AgentConnection
from seamline.acp_agent.stdio import serve_stdio

__all__ = ["AcpAgentSettings", "AgentConnection", "SeamlineAcpAgent", "serve_stdio"]

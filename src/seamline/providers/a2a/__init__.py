"""A2A (Agent2Agent): a remote agent as a backend. The JSON-RPC wire (``wire``), the agent
card (``card``), results as events (``translator``) and the provider (``provider``)."""

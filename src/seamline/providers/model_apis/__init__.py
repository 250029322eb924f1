"""Model APIs: seamline runs the agent loop and calls a vendor's HTTP API for each step.

``base`` holds what the OpenAI and Anthropic providers share (the step state, tool
arguments, the request shape); ``retry`` classifies failures and reads ``Retry-After``;
``gated_client`` puts the SDK client on the gateway's in-process transport.
"""

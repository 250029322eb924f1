"""Model APIs: seamline runs the agent loop and calls a vendor's HTTP API for each step.

``base`` holds what the OpenAI and Anthropic providers share (the step state, tool
arguments, the request shape); ``retry`` classifies failures and reads ``Retry-After``;
``through_gateway`` points a session's SDK client at its model gateway.
"""

"""The model gateway: one local path for every backend's model traffic.

:class:`~seamline.gateway.relay.ModelGateway` relays a program's model requests to their
upstream, puts the real credential in place of the placeholder the program was given, reads
each response's usage from the wire (:mod:`seamline.gateway.meter`) and can refuse a request
before it is sent (a budget reached). It can record every exchange to a cassette, or answer
from one with no upstream at all (:mod:`seamline.gateway.cassette`). See docs/gateway.md.
"""

from seamline.gateway.relay import Binding, GatewayRefusal, ModelGateway, Upstream, vendor_error

__all__ = ["Binding", "GatewayRefusal", "ModelGateway", "Upstream", "vendor_error"]

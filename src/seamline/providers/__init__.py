"""The provider seam and the registry of backends."""

from seamline.providers.base import Capabilities, OptionSpec, PreflightCheck, Provider, ProviderSession
from seamline.providers.registry import create_provider, provider_class, provider_names, register

__all__ = [
    "Capabilities",
    "OptionSpec",
    "PreflightCheck",
    "Provider",
    "ProviderSession",
    "create_provider",
    "provider_class",
    "provider_names",
    "register",
]

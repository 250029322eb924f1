"""The sandbox: file and shell tools run isolated or not at all.

Backends: ``bwrap`` (bubblewrap with user namespaces), ``container`` (the surrounding
container is trusted as the boundary, on the user's explicit word) and ``auto`` (probe
bwrap; refuse with guidance when it cannot isolate). Layout inside: ``/inputs``
read-only, ``/workspace`` the working folder, ``/outputs`` and ``/outputs/scratch``.
Every change a tool makes to the workspace is journaled for ``seamline revert``.
See docs/sandbox.md.
"""

from seamline.sandbox.journal import EditJournal, JournalStep, RevertReport, journal_path_for
from seamline.sandbox.policy import ResourceLimits, SandboxPolicy, load_policy
from seamline.sandbox.probe import SANDBOX_MODES, ProbeReport, SandboxMode, open_sandbox, probe
from seamline.sandbox.publish import OutputManifest
from seamline.sandbox.runtime import Sandbox

__all__ = [
    "SANDBOX_MODES",
    "EditJournal",
    "JournalStep",
    "OutputManifest",
    "ProbeReport",
    "ResourceLimits",
    "RevertReport",
    "Sandbox",
    "SandboxMode",
    "SandboxPolicy",
    "journal_path_for",
    "load_policy",
    "open_sandbox",
    "probe",
]

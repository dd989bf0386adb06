"""Python client for lbb: run code you did not write in an isolated sandbox, in one call.

    from lbb import LbbClient

    lbb = LbbClient()  # $LBB_URL and $LBB_API_KEY, else the local server and its saved key
    run = lbb.sandboxes.run(code="def run(input, config):\\n    return sum(input)", input=[1, 2, 3])
    run.result   # 6
    run.command  # "cmd_…", the record of this run

:class:`AsyncLbbClient` has the same calls for asyncio.
"""

from ._async_client import (
    AsyncCommands,
    AsyncFiles,
    AsyncLbbClient,
    AsyncSandbox,
    AsyncSandboxCommands,
    AsyncSandboxes,
    AsyncSandboxFiles,
    AsyncSnapshots,
    AsyncTemplates,
)
from ._client import Commands, Files, LbbClient, Sandbox, SandboxCommands, Sandboxes, SandboxFiles, Snapshots, Templates
from ._errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    CommandsRunningError,
    ConflictError,
    IdempotencyConflictError,
    IdempotencyKeyRequiredError,
    InternalServerError,
    InvalidRequestError,
    IsolationUnavailableError,
    LbbError,
    NotFoundError,
    NotSupportedError,
    OutputLostError,
    PathOutsideWorkspaceError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    TooManySandboxesError,
    UnavailableError,
    UnprocessableError,
)
from ._models import Command, File, FileInfo, ForkedFrom, Output, Page, Record, RunResult, SandboxRecord, Snapshot, Template
from ._sse import ServerSentEvent
from ._version import __version__

__all__ = [
    "LbbClient",
    "AsyncLbbClient",
    "Sandboxes",
    "Sandbox",
    "SandboxFiles",
    "SandboxCommands",
    "Templates",
    "Commands",
    "Files",
    "Snapshots",
    "AsyncSandboxes",
    "AsyncSandbox",
    "AsyncSandboxFiles",
    "AsyncSandboxCommands",
    "AsyncTemplates",
    "AsyncCommands",
    "AsyncFiles",
    "AsyncSnapshots",
    "Record",
    "RunResult",
    "Command",
    "Output",
    "SandboxRecord",
    "Snapshot",
    "ForkedFrom",
    "Template",
    "File",
    "FileInfo",
    "Page",
    "ServerSentEvent",
    "LbbError",
    "OutputLostError",
    "APIConnectionError",
    "APITimeoutError",
    "APIStatusError",
    "InvalidRequestError",
    "IdempotencyKeyRequiredError",
    "PathOutsideWorkspaceError",
    "IsolationUnavailableError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "NotSupportedError",
    "CommandsRunningError",
    "PayloadTooLargeError",
    "UnprocessableError",
    "IdempotencyConflictError",
    "RateLimitError",
    "TooManySandboxesError",
    "InternalServerError",
    "UnavailableError",
    "__version__",
]

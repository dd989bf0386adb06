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
    AsyncTemplates,
)
from ._client import Commands, Files, LbbClient, Sandbox, SandboxCommands, Sandboxes, SandboxFiles, Templates
from ._errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    ConflictError,
    IdempotencyConflictError,
    IdempotencyKeyRequiredError,
    InternalServerError,
    InvalidRequestError,
    LbbError,
    NotFoundError,
    PathOutsideWorkspaceError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    TooManySandboxesError,
    UnavailableError,
    UnprocessableError,
)
from ._models import Command, File, FileInfo, Output, Page, Record, RunResult, SandboxRecord, Template
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
    "AsyncSandboxes",
    "AsyncSandbox",
    "AsyncSandboxFiles",
    "AsyncSandboxCommands",
    "AsyncTemplates",
    "AsyncCommands",
    "AsyncFiles",
    "Record",
    "RunResult",
    "Command",
    "Output",
    "SandboxRecord",
    "Template",
    "File",
    "FileInfo",
    "Page",
    "ServerSentEvent",
    "LbbError",
    "APIConnectionError",
    "APITimeoutError",
    "APIStatusError",
    "InvalidRequestError",
    "IdempotencyKeyRequiredError",
    "PathOutsideWorkspaceError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "PayloadTooLargeError",
    "UnprocessableError",
    "IdempotencyConflictError",
    "RateLimitError",
    "TooManySandboxesError",
    "InternalServerError",
    "UnavailableError",
    "__version__",
]

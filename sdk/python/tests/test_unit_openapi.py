"""The typed fields of the SDK's records are fields of the OpenAPI document's schemas
(internal/api/openapi.json): a field the server renames or drops fails here, not in a user's code."""

import json
import pathlib

import lbb
from lbb._models import _Field

DOCUMENT = pathlib.Path(__file__).resolve().parents[3] / "internal" / "api" / "openapi.json"

# Each record class and the schema it reads.
SCHEMAS = {
    lbb.Output: "Output",
    lbb.RunResult: "RunResult",
    lbb.Command: "Command",
    lbb.ForkedFrom: "ForkedFrom",
    lbb.SandboxRecord: "Sandbox",
    lbb.Snapshot: "Snapshot",
    lbb.Preview: "Preview",
    lbb.Template: "Template",
    lbb.FileInfo: "FileEntry",
    lbb.File: "File",
    lbb.Quota: "Quota",
    lbb.Quotas: "Quotas",
}


def test_record_fields_are_the_documents():
    schemas = json.loads(DOCUMENT.read_text())["components"]["schemas"]
    missing = []
    for cls, name in SCHEMAS.items():
        props = schemas[name]["properties"]
        fields = {k for c in cls.__mro__ for k, v in vars(c).items() if isinstance(v, _Field)}
        assert fields, cls
        missing += [f"{cls.__name__}.{f} (schema {name})" for f in sorted(fields) if f not in props]
    assert missing == [], "typed fields the OpenAPI document does not have"

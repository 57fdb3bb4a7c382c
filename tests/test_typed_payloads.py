"""The typed core: every shape rig hands between its modules and processes is a record of the one
strict base (rig.typed), typed all the way down; no public function passes `dict[str, Any]` where
a record exists (the ones left carry another tool's format or a file their own module writes and
reads, each with its reason); stored records refuse another schema version in one line; and the
module the Locust processes import for them stays light."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import typing_extensions
from pydantic import BaseModel

from rig.typed import StoredRecordError, Typed, Versioned

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "rig"


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] in ("__init__", "__main__"):
            parts = parts[:-1] if parts[-1] == "__init__" else []
        if parts and not ".".join(parts).startswith("rig.load.client."):  # imports Locust, which patches the standard library
            names.append(".".join(parts))
    return names


def _records() -> list[type[BaseModel]]:
    for name in _modules():
        importlib.import_module(name)  # rig.kernelbench needs torch: make setup installs the extra
    found, stack = [], [Typed]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            stack.append(sub)
            if sub.__module__.startswith("rig.") and sub.__module__ != "rig.typed":
                found.append(sub)
    return found


RECORDS = _records()


def _mentions_any(annotation: object) -> bool:
    if annotation is typing.Any:
        return True
    if isinstance(annotation, typing_extensions.TypeAliasType):  # JsonValue: a precise recursive JSON type, not Any
        return False
    return any(_mentions_any(arg) for arg in typing.get_args(annotation))


def test_the_records_are_found():
    names = {cls.__name__ for cls in RECORDS}
    assert {"Metrics", "Window", "RequestCounts", "Distribution", "TokenFigures", "ClientVerdict", "Provenance", "Fingerprint",
            "GreedyIdentity", "Analysis", "QualityReport", "RunSummary", "ComparePlan", "BootEntry", "RunResult", "BootRecord",
            "LoadConfig", "WindowEvent", "ClientStats", "RunNote", "BootMarker", "RequestRecord", "Recipe", "Scenario",
            "AuditReport", "BackendRule", "ModelDims", "KernelbenchReport", "SweepReport"} <= names


@pytest.mark.parametrize("record", RECORDS, ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_every_record_is_strict_and_typed_all_the_way_down(record):
    config = record.model_config
    assert config.get("extra") == "forbid" and config.get("strict") is True
    loose = [name for name, field in record.model_fields.items() if _mentions_any(field.annotation)]
    assert not loose, f"{record.__name__}: fields typed Any: {loose}"


@pytest.mark.parametrize("record", [cls for cls in RECORDS if issubclass(cls, Versioned)], ids=lambda cls: cls.__name__)
def test_every_stored_record_has_its_own_schema_version(record):
    version = record.model_fields["schema_version"].default
    assert isinstance(version, int) and version >= 1 and record.model_fields["schema_version"].alias == "schema"


# Public functions that still take or return `dict[str, Any]`, and why no record stands in for it.
ALLOWED = {
    "rig.client.output_piece": "a server's raw streaming choice object (OpenAI protocol)",
    "rig.chat.stream_chat": "`extra`: request fields passed through to the server as given",
    "rig.load.sse.StreamScan.usage": "the server's usage object as it sent it (RequestRecord.usage holds it as JSON)",
    "rig.loadrun.attach.detect_engine": "the server's /v1/models answer",
    "rig.load.peers.vllm.vllm_result": "vLLM's result JSON: another tool's format, written as that tool reads it",
    "rig.load.peers.aiperf.aiperf_records": "AIPerf's profile_export.jsonl rows: another tool's format",
    "rig.load.peers.aiperf.aiperf_aggregate": "AIPerf's profile_export_aiperf.json: another tool's format",
    "rig.observe.jsonl.append": "raw telemetry lines, written and read by the observe module that samples them",
    "rig.observe.jsonl.read": "raw telemetry lines, written and read by the observe module that samples them",
    "rig.observe.gpu.read_gpu": "one NVML reading, a raw sample line of gpu-samples.jsonl (read back in rig.observe.gpu)",
    "rig.observe.server_metrics.name_table": "server_metrics.yaml, the per-engine Prometheus name table",
    "rig.observe.server_metrics.read_scrapes": "raw Prometheus samples, written and read by rig.observe.server_metrics",
    "rig.observe.server_metrics.detect_engine": "raw Prometheus samples, written and read by rig.observe.server_metrics",
    "rig.observe.fingerprint.gpu_fingerprint": "Fingerprint's NVML fields by name, for Fingerprint(**...)",
    "rig.observe.fingerprint.flatten": "any JSON value flattened to comparable leaves",
    "rig.boot.checks.read_manifests": "adapter manifests, written inside the engine by rig_adapters (stdlib only, its own schema)",
    "rig.observe.fingerprint.read_manifest": "one adapter manifest, as rig.boot.checks.read_manifests reads them",
    "rig.observe.gpu.gpu_sample_or_note": "a raw telemetry line's shape check, for rig.observe.jsonl.read",
    "rig.tinymodel.presets": "generated_models.json, read by this file also when it runs standalone in an image build",
}


def _loose_public_functions() -> set[str]:
    found = set()
    for name in _modules():
        path = REPO / (name.replace(".", "/") + ".py")
        if not path.exists():
            path = REPO / name.replace(".", "/") / "__init__.py"
        tree = ast.parse(path.read_text())
        scopes: list[tuple[str, ast.AST]] = [(name, tree)]
        while scopes:
            prefix, scope = scopes.pop()
            for node in ast.iter_child_nodes(scope):
                if isinstance(node, ast.ClassDef):
                    scopes.append((f"{prefix}.{node.name}", node))
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                    signature = ast.unparse(node.args) + (ast.unparse(node.returns) if node.returns else "")
                    if "dict[str, Any]" in signature:
                        found.add(f"{prefix}.{node.name}")
    return found


def test_no_public_function_passes_a_dict_of_any_where_a_record_exists():
    loose = _loose_public_functions()
    assert loose <= set(ALLOWED), f"typed records instead of dict[str, Any]: {sorted(loose - set(ALLOWED))}"
    assert set(ALLOWED) <= loose, f"no longer loose, drop from ALLOWED: {sorted(set(ALLOWED) - loose)}"


def test_a_stored_record_of_another_version_or_none_is_refused_in_one_line(tmp_path):
    from rig.load.records import RequestRecord, read_records
    from rig.load.summary import RunSummary

    record = RequestRecord(id="a", process="p", user="u", prompt="x", t_send=1.0)
    line = json.loads(record.to_line())
    (tmp_path / "records-p.jsonl").write_text(json.dumps({**line, "schema": 2}) + "\n")
    with pytest.raises(StoredRecordError, match="line 1: schema: schema 2 is not 3") as error:
        read_records(tmp_path)
    assert "\n" not in str(error.value)
    (tmp_path / "records-p.jsonl").write_text(record.to_line() + "\n" + record.to_line()[:20])  # the last line cut by a kill
    assert len(read_records(tmp_path)) == 1
    without = {k: v for k, v in line.items() if k != "schema"}
    with pytest.raises(StoredRecordError, match="no schema version"):
        RequestRecord.parse(json.dumps(without), "x")
    with pytest.raises(StoredRecordError, match="extra_field"):
        RequestRecord.parse(json.dumps({**line, "extra_field": 1}), "x")  # a renamed key is refused, never dropped
    (tmp_path / "summary.json").write_text('{"schema": 2}')
    with pytest.raises(StoredRecordError, match="schema 2 is not"):
        RunSummary.read(tmp_path)


def test_the_files_the_locust_processes_share_are_cheap_to_import():
    """The locustfile imports these on every Locust process, remote workers included."""
    code = ("import sys, rig.load.wire, rig.load.records, rig.load.workload, rig.client, rig.load.sse; "
            "print(sorted(m for m in ('numpy', 'scipy', 'yaml', 'torch', 'transformers', 'matplotlib', 'requests', 'docker', "
            "'rig.deploy.recipe', 'rig.deploy.recipe_model', 'rig.load.scenarios') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert result.stdout.strip() == "[]", result.stdout


def test_the_wire_records_round_trip(tmp_path):
    from rig.load.wire import ClientStats, LoadConfig, Nonce, Prompt, RunNote, WindowEvent, read_lines

    config = LoadConfig(scenario="s", kind="decode", base_url="http://127.0.0.1:1", model="m", endpoint="chat", max_tokens=8,
                        temperature=0.0, seed=1, prompts=[Prompt(name="p", text="t", tokens=4)],
                        nonce=Nonce(alphabet=(" a", " b"), length=3, separator="\n", tokens=4), out_dir=str(tmp_path))
    (tmp_path / "config.json").write_text(config.json_text())
    assert LoadConfig.read(tmp_path / "config.json") == config
    stats = ClientStats(process="p", lag=[(1.0, 0.001)], cpu_time=[(1.0, 0.5)])
    assert ClientStats.parse(stats.json_text(), "c") == stats  # tuples come back from JSON arrays
    path = tmp_path / "runs.jsonl"
    note = RunNote(dir="d", scenario="s", warmup=True, complete=True, settle_s=None, time=1.0)
    path.write_text(note.json_text(indent=None) + "\n" + WindowEvent(event="stopping", time=2.0).json_text(indent=None)[:10])
    assert list(read_lines(path, RunNote)) == [note]


def test_the_tokenizer_reads_tokenizer_json_without_transformers(tmp_path):
    """A client host has no transformers: the served model's tokenizer.json alone counts tokens, as
    transformers' own tokenizer does."""
    from rig import paths
    from rig.load.prompts import LocalTokenizer, TokenCounter
    from rig.tinymodel import ensure_tiny_model

    model_dir = ensure_tiny_model(paths.cache_dir() / "models")
    text = (REPO / "loadtests" / "prompts" / "code.txt").read_text()[:2000] + " <|eos|> üñ 中文"
    code = ("import sys; sys.modules['transformers'] = None\n"
            "from rig.load.prompts import TokenCounter\n"
            f"counter = TokenCounter({str(model_dir)!r})\n"
            "import json; ids = counter.encode(sys.stdin.read()); print(json.dumps([ids, counter.decode(ids)]))")
    result = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True, cwd=REPO)
    ids, decoded = json.loads(result.stdout)
    assert TokenCounter(str(model_dir)).source == "local tokenizer"
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(model_dir)
    assert ids == reference.encode(text, add_special_tokens=False) and decoded == reference.decode(ids)
    assert LocalTokenizer.load(tmp_path) is None  # no tokenizer here: the server's /tokenize counts

"""The Python API mirrors the Rust one: metric and size names, setting defaults, stubs, docs."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pyarrow as pa
import pytest

import arrow_shards
from conftest import REPO, int_batch

RUST = REPO / "crates" / "arrow-shards" / "src"
STUB = Path(arrow_shards.__file__).with_name("_native.pyi")


def rust_struct_fields(path: Path, struct: str) -> list[str]:
    """The `pub` field names of `pub struct <struct> { ... }` in a Rust source."""
    source = path.read_text()
    body = re.search(r"pub struct " + struct + r" \{(.*?)\n\}", source, re.S)
    assert body, f"no struct {struct} in {path}"
    return re.findall(r"^\s*pub (\w+):", body.group(1), re.M)


@pytest.fixture
def rust_sources() -> None:
    if not RUST.is_dir():
        pytest.skip("not in a checkout of the repository")


def test_metrics_keys_are_the_rust_field_names(rust_sources: None) -> None:
    with arrow_shards.ShardBuffer(pa.schema([("k", pa.int64())]), 2) as buffer:
        keys = list(buffer.metrics())
        closed = list(buffer.close())
    assert keys == rust_struct_fields(RUST / "metrics.rs", "Metrics")
    assert closed == keys


def test_partition_size_keys_are_the_rust_field_names(rust_sources: None) -> None:
    with arrow_shards.ShardBuffer(pa.schema([("k", pa.int64())]), 3) as buffer:
        buffer.write(1, int_batch(0, 5))
        sizes = buffer.partition_sizes()
    assert len(sizes) == 3
    assert list(sizes[0]) == rust_struct_fields(RUST / "state" / "mod.rs", "PartitionSize")
    assert sizes[1]["memory_rows"] == 5 and sizes[0]["memory_rows"] == 0


def size(value: object) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    if isinstance(value, str):
        number, unit = re.fullmatch(r"(\d+)(\w+)", value).groups()  # type: ignore[union-attr]
        return int(number) * units[unit]
    assert isinstance(value, int)
    return value


def test_documented_defaults_are_the_rust_defaults() -> None:
    parameters = inspect.signature(arrow_shards.ShardBuffer).parameters
    defaults = {name: p.default for name, p in parameters.items()}
    assert defaults["read_batch_rows"] == arrow_shards.DEFAULT_READ_BATCH_ROWS == 8192
    assert defaults["spill_threshold"] == arrow_shards.DEFAULT_SPILL_THRESHOLD
    assert defaults["spill_target"] == arrow_shards.DEFAULT_SPILL_TARGET
    assert size(defaults["max_spill_round_bytes"]) == arrow_shards.DEFAULT_MAX_SPILL_ROUND_BYTES
    assert size(defaults["spill_segment_bytes"]) == arrow_shards.DEFAULT_SPILL_SEGMENT_BYTES
    assert size(defaults["spill_file_bytes"]) == arrow_shards.DEFAULT_SPILL_FILE_BYTES
    assert defaults["compact_target_rows"] == arrow_shards.DEFAULT_COMPACT_TARGET_ROWS
    assert defaults["read_stall_timeout"] == arrow_shards.DEFAULT_READ_STALL_TIMEOUT == 60.0
    assert size(defaults["compact_target_bytes"]) == arrow_shards.DEFAULT_COMPACT_TARGET_BYTES
    assert (defaults["memory_limit"], defaults["spill"], defaults["compression"]) == (None, True, "none")
    # Passing the documented defaults is the same as passing nothing.
    with arrow_shards.ShardBuffer(pa.schema([("k", pa.int64())]), 1, **{
        k: v for k, v in defaults.items() if k not in ("schema", "num_partitions")
    }) as buffer:
        assert buffer.metrics()["memory_limit"] is None


def stub_classes() -> dict[str, ast.ClassDef]:
    tree = ast.parse(STUB.read_text())
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def public(names: object) -> set[str]:
    return {n for n in names if not n.startswith("_")}  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["ShardBuffer", "MemoryPool", "PartitionBatches"])
def test_stubs_cover_the_native_classes(name: str) -> None:
    stub = stub_classes()[name]
    stubbed = {
        node.name
        for node in stub.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    native = getattr(arrow_shards, name)
    assert public(dir(native)) <= stubbed, "add these to _native.pyi"
    assert stubbed <= set(dir(native)), "remove these from _native.pyi"


def test_stubs_name_the_module_constants() -> None:
    tree = ast.parse(STUB.read_text())
    constants = {
        node.target.id
        for node in tree.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
    assert {n for n in arrow_shards.__all__ if n.startswith("DEFAULT_")} == constants
    assert (STUB.parent / "py.typed").exists()


def test_every_public_name_has_a_docstring() -> None:
    for name in arrow_shards.__all__:
        value = getattr(arrow_shards, name)
        if isinstance(value, type):
            assert value.__doc__, name
            for method in public(vars(value)):
                attribute = getattr(value, method)
                if callable(attribute) or isinstance(vars(value)[method], property):
                    assert attribute.__doc__, f"{name}.{method}"
    doc = arrow_shards.ShardBuffer.__doc__ or ""
    for setting in inspect.signature(arrow_shards.ShardBuffer).parameters:
        assert f"`{setting}`" in doc, f"the class docstring does not explain {setting}"
    assert "write(partition, data)" in (arrow_shards.ShardBuffer.write.__doc__ or "")
    assert inspect.signature(arrow_shards.ShardBuffer.write_partitioned).parameters.keys() >= {
        "data",
        "partition_ids",
    }


def test_exception_hierarchy() -> None:
    base = arrow_shards.ArrowShardsError
    for name in arrow_shards._errors.__all__:
        assert issubclass(getattr(arrow_shards, name), base), name
    assert issubclass(arrow_shards.DiskFullError, arrow_shards.SpillError)
    assert issubclass(arrow_shards.CorruptSpillError, arrow_shards.SpillError)
    assert issubclass(arrow_shards.SealedError, arrow_shards.NotWritableError)
    assert issubclass(arrow_shards.ConfigError, ValueError)
    assert issubclass(arrow_shards.PartitionOutOfRangeError, IndexError)


def test_context_manager_closes(spill_root: Path) -> None:
    with arrow_shards.ShardBuffer(
        pa.schema([("k", pa.int64())]), 2, memory_limit="8MiB", spill_dir=spill_root
    ) as buffer:
        assert buffer.spill_dir is not None and buffer.spill_dir.is_dir()
        assert not buffer.closed
        assert "num_partitions=2" in repr(buffer)
        buffer.write(0, int_batch(0, 3))
    assert buffer.closed and "closed" in repr(buffer)
    assert list(spill_root.iterdir()) == []
    with pytest.raises(arrow_shards.ClosedError):
        buffer.write(0, int_batch(0, 1))
    with pytest.raises(KeyError):
        with arrow_shards.ShardBuffer(pa.schema([("k", pa.int64())]), 2) as other:
            raise KeyError("the block's own error goes through")
    assert other.closed


def test_schema_and_partitions() -> None:
    schema = pa.schema([("k", pa.int64()), ("s", pa.string())], metadata={"owner": "test"})
    with arrow_shards.ShardBuffer(schema, 5) as buffer:
        assert buffer.schema.equals(schema, check_metadata=True)
        assert buffer.num_partitions == 5
        assert buffer.spill_dir is None  # no memory limit: nothing can spill
    # Anything exporting __arrow_c_schema__ is a schema.
    class Exporter:
        def __arrow_c_schema__(self) -> object:
            return schema.__arrow_c_schema__()

    with arrow_shards.ShardBuffer(Exporter(), 1) as buffer:
        assert buffer.schema.equals(schema)


def test_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", arrow_shards.__version__)


def test_the_examples_of_docs_python_md_run(capsys: pytest.CaptureFixture[str]) -> None:
    doc = REPO / "docs" / "python.md"
    if not doc.exists():
        pytest.skip("not in a checkout of the repository")
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    assert len(blocks) >= 2
    for block in blocks:
        exec(compile(block, str(doc), "exec"), {"__name__": "docs_python_md"})  # noqa: S102
    assert "200000 rows; True spilled" in capsys.readouterr().out

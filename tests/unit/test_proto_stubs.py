"""The checked-in gRPC stubs under sluice/v1/ are what protoc makes of proto/sluice/v1/*.proto."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTOS = sorted((ROOT / "proto" / "sluice" / "v1").glob("*.proto"))
CHECKED_IN = ROOT / "sluice" / "v1"
HINT = "the stubs under sluice/v1/ are stale: run `make proto`"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("stubs")
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        "-Iproto",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *(str(p.relative_to(ROOT)) for p in PROTOS),
    ]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"protoc failed:\n{result.stderr}"
    return out / "sluice" / "v1"


def test_there_are_protos():
    assert {"common.proto", "jobmanager.proto", "taskmanager.proto", "dataexchange.proto"} <= {p.name for p in PROTOS}


def test_every_proto_has_its_three_stubs(generated):
    expected = {f"{p.stem}{suffix}" for p in PROTOS for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")}
    assert {f.name for f in generated.iterdir()} == expected
    missing = sorted(name for name in expected if not (CHECKED_IN / name).is_file())
    assert not missing, f"missing {missing}: {HINT}"


def test_no_stale_stub_without_a_proto():
    stems = {p.stem for p in PROTOS}
    orphans = sorted(f.name for f in CHECKED_IN.glob("*_pb2*.py*") if f.name.split("_pb2")[0] not in stems)
    assert not orphans, f"stubs without a .proto: {orphans}; delete them and run `make proto`"


@pytest.mark.parametrize(
    "name", sorted(f"{p.stem}{s}" for p in PROTOS for s in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"))
)
def test_checked_in_stub_matches_the_proto(generated, name):
    fresh = (generated / name).read_text()
    checked_in = (CHECKED_IN / name).read_text() if (CHECKED_IN / name).is_file() else None
    assert checked_in == fresh, f"sluice/v1/{name} differs from what protoc generates: {HINT}"

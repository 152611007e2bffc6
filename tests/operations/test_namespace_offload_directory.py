"""A namespace's offload_directory must be an absolute path apart from the broker's data
directory: set through the registry and through the admin API (400 with the reason)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.topics.namespaces import NamespaceError, NamespaceRegistry
from tests.operations.http_support import request
from tests.operations.ops_stack import OpsStack


async def test_offload_directory_is_absolute_normalised_and_apart_from_the_data_dir(
        ops: OpsStack, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "bookies").mkdir(parents=True)
    (tmp_path / "link").symlink_to(data / "bookies")
    ns = NamespaceRegistry(ops.store, data_dir=data)
    await ns.load()
    await ns.create_tenant("t")
    refused = [
        "tier",  # relative: each broker process would resolve it against its own cwd
        "./tier",
        str(data),
        str(data / "bookies" / "0"),
        f"{tmp_path}/tier/../data/metadata",  # inside once normalised
        str(tmp_path),  # contains the data directory
        "/",
        str(tmp_path / "link" / "x"),  # a symbolic link into the data directory
    ]
    for bad in refused:
        with pytest.raises(NamespaceError) as caught:
            await ns.set_policies("public/default", {"offload_directory": bad})
        assert caught.value.status == 400 and "offload_directory" in str(caught.value), bad
        with pytest.raises(NamespaceError):
            await ns.create_namespace("t/n", {"offload_directory": bad})
    assert ns.policies("public/default").offload_directory is None
    assert "t/n" not in ns.namespaces()

    kept = await ns.set_policies("public/default",
                                 {"offload_directory": f"/{tmp_path}//tier/./b/"})
    assert kept.offload_directory == str(tmp_path / "tier" / "b")
    await ns.create_namespace("t/n", {"offload_directory": "/mnt/tier-b"})
    assert ns.policies("t/n").offload_directory == "/mnt/tier-b"
    reset = await ns.set_policies("public/default", {"offload_directory": None})
    assert reset.offload_directory is None


async def test_the_admin_api_answers_400_for_a_relative_offload_directory(
        ops: OpsStack, admin_port: int) -> None:
    path = "/admin/v1/namespaces/public/default/policies"
    status, answer = await request(admin_port, "POST", path, {"offload_directory": "tier"})
    assert status == 400, answer
    assert "absolute path" in str(answer) and "Traceback" not in str(answer)
    status, answer = await request(admin_port, "POST", path,
                                   {"offload_directory": "/srv//tier/"})
    assert status == 200 and answer["offload_directory"] == "/srv/tier", answer

"""deploy/kubernetes: rendered by `kubectl kustomize`, every object validated against the
Kubernetes API schemas (kubernetes-validate, offline, strict: an unknown field fails), and
what the manifests promise (docs/OPERATIONS.md, "Kubernetes")."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
VALIDATE = str(Path(sys.executable).with_name("kubernetes-validate"))
# The newest release the package has schemas for, and an older one still supported upstream.
VERSIONS = ("1.37.0", "1.32.0")


def kustomize(directory: Path = MANIFESTS) -> subprocess.CompletedProcess[str]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is missing (.ci/run installs Debian's kubernetes-client)"
    return subprocess.run(  # noqa: S603 (kubectl on PATH)
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False
    )


def rendered() -> list[dict[str, Any]]:
    done = kustomize()
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def validate(path: Path, version: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 (the venv's kubernetes-validate)
        [VALIDATE, "--strict", "-k", version, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_rendered_manifests_follow_the_kubernetes_schemas(tmp_path: Path) -> None:
    docs = rendered()
    kinds = {doc["kind"] for doc in docs}
    assert kinds == {
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ServiceAccount",
    }
    (tmp_path / "rendered.yaml").write_text(yaml.safe_dump_all(docs))
    for version in VERSIONS:
        for path in (tmp_path / "rendered.yaml", MANIFESTS / "secret.example.yaml"):
            checked = validate(path, version)
            assert checked.returncode == 0, checked.stdout + checked.stderr
            assert "passed" in checked.stdout + checked.stderr


def test_a_misspelt_field_fails_the_schema_check(tmp_path: Path) -> None:
    docs = rendered()
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbes"] = container.pop("readinessProbe")
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(deployment))
    checked = validate(tmp_path / "broken.yaml", VERSIONS[0])
    assert checked.returncode != 0
    assert "readinessProbes" in checked.stdout + checked.stderr


def test_kustomize_refuses_a_missing_resource(tmp_path: Path) -> None:
    shutil.copytree(MANIFESTS, tmp_path / "k")
    (tmp_path / "k" / "service.yaml").unlink()
    assert kustomize(tmp_path / "k").returncode != 0


def test_the_pods_are_probed_non_root_read_only_and_keep_their_secrets_in_files() -> None:
    docs = {doc["kind"]: doc for doc in rendered()}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]["memory"]
    env = {e["name"]: e for e in container["env"]}
    # Secrets as files from the Secret, never as values in the manifest.
    assert "SEALFLOW_MASTER_KEY" not in env
    assert "SEALFLOW_KEYSTORE_URL" not in env
    mounted = "/run/secrets/sealflow/"
    assert env["SEALFLOW_MASTER_KEY_FILE"]["value"] == mounted + "master.key"
    assert env["SEALFLOW_KEYSTORE_URL_FILE"]["value"] == mounted + "keystore-url"
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == "sealflow"
    assert {item["key"] for item in volume["secret"]["items"]} == {"master.key", "keystore-url"}
    # The example Secret carries those keys, marked as placeholders, and is not rendered.
    example = yaml.safe_load((MANIFESTS / "secret.example.yaml").read_text())
    assert set(example["stringData"]) == {"master.key", "keystore-url"}
    assert all("PLACEHOLDER" in value for value in example["stringData"].values())
    # The Service, the budget and the policy select the Deployment's pods.
    labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert docs["Service"]["spec"]["selector"].items() <= labels.items()
    assert docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert docs["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"].items() <= labels.items()

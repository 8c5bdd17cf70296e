"""Every deployment gives numba a writable kernel cache, and the image ships it compiled (warm starts)."""

from __future__ import annotations

import shlex

from deploy_support import last, unit
from test_container import stages


def _env(stage) -> dict[str, str]:
    out = {}
    for args in stage.all("ENV"):
        for item in shlex.split(args.replace("\\\n", " ")):
            key, _, value = item.partition("=")
            out[key] = value
    return out


def test_the_image_compiles_the_kernels_into_the_cache_it_runs_with() -> None:
    s = stages()
    build_run = s["build"].one("RUN")
    assert "python -m ddflow.operators.kernels.warm" in build_run
    assert "python -m ddflow.daemon.formats.kernels.warm" in build_run  # the msgpack codec's kernels
    built_into = build_run.split("NUMBA_CACHE_DIR=", 1)[1].split()[0]
    copies = [shlex.split(a) for a in s["base"].all("COPY") if a.startswith("--from=build") and built_into in a]
    assert copies, "the compiled cache is copied into the runtime image"
    destination = copies[0][-1]
    env = _env(s["base"])
    assert env["NUMBA_CACHE_DIR"] == destination
    assert "--chown=10001:10001" in copies[0], "numba uses only a cache directory it can write"
    assert env.get("NUMBA_CPU_NAME") == "generic" and "NUMBA_CPU_NAME=generic" in build_run, \
        "built and run for the same CPU name, or the cache misses"


def test_kubernetes_copies_the_compiled_kernels_into_a_writable_volume(base_docs: list[dict]) -> None:
    (statefulset,) = [d for d in base_docs if d["kind"] == "StatefulSet"]
    pod = statefulset["spec"]["template"]["spec"]
    (main,) = pod["containers"]
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    image_cache = _env(stages()["base"])["NUMBA_CACHE_DIR"]
    env = {e["name"]: e.get("value") for e in main.get("env", [])}
    cache_dir = env.get("NUMBA_CACHE_DIR", image_cache)
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    volume = mounts[cache_dir]
    assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == volume)
    (init,) = pod["initContainers"]
    assert init["image"] == main["image"]
    target = next(m["mountPath"] for m in init["volumeMounts"] if m["name"] == volume)
    assert init["command"][:2] == ["cp", "-R"] and init["command"][2] == f"{image_cache}/." \
        and init["command"][3].rstrip("/") == target


def test_systemd_units_cache_kernels_in_their_cache_directory() -> None:
    for name in ("ddflow.service", "ddflow@.service"):
        entries = unit(name)
        cache = last(entries, "Service", "CacheDirectory")
        env = dict(e.split("=", 1) for e in entries[("Service", "Environment")])
        assert env["NUMBA_CACHE_DIR"].startswith(f"/var/cache/{cache}/"), name


def test_the_guide_s_warm_up_commands_are_the_image_s_and_run() -> None:
    """docs/deployment.md's commands compile (here: load, the session compiled them) every kernel,
    the engine's and the wire formats', as the image build does."""
    import subprocess
    import sys

    from support.docs import example

    commands = [shlex.split(part) for part in example("warm-kernels", "bash").strip().split(" && ")]
    build_run = stages()["build"].one("RUN")
    for argv in commands:
        assert argv[:2] == ["python", "-m"] and f"python -m {argv[2]}" in build_run
        done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "kernels compiled or loaded" in done.stdout + done.stderr

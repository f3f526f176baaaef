"""Checks before vLLM starts: pure functions over the plan and measured facts.

Each check takes what it needs as arguments (GPU count, free disk bytes, ports in
use, the installed vLLM's version ...) and returns :class:`Finding` values: one
sentence each that names the setting to change. A finding with ``refuse=True``
means the launch cannot work (launch.sh stops before starting anything); the
others are warnings (it works, but not as well as the settings suggest).
``serving.launcher`` measures the facts and calls these; tests call them with
fake figures.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from backend.exposure import ADD_USER as ADD_USER  # the app refuses alike
from backend.exposure import is_loopback as is_loopback


class PlanError(Exception):
    """The requested launch cannot work; the message says why, in one line."""


@dataclass(frozen=True)
class Finding:
    """One preflight result.

    Attributes:
        text: one sentence for the operator, naming the setting to change.
        refuse: True if the launch cannot work with it (launch.sh exits 2).
    """

    text: str
    refuse: bool = False


def refusals(findings: list[Finding]) -> list[Finding]:
    """The findings that stop the launch."""
    return [f for f in findings if f.refuse]


def head_divisors(heads: tuple[int, ...]) -> list[int]:
    """Tensor parallel sizes that divide every tower's attention heads."""
    return [n for n in range(1, max(heads) + 1) if all(h % n == 0 for h in heads)]


def tensor_parallel_size(requested: int, gpus: int, heads: tuple[int, ...]) -> tuple[int, str]:
    """Choose the tensor parallel size and say why if it is not the obvious one.

    ``requested`` 0 means "all ``gpus``" (the caller passes the GPUs left per
    pipeline stage and data-parallel rank); if that count does not divide the
    attention heads (3 GPUs, 16 heads) the largest size that does is used.

    Returns:
        (size, note); note is empty unless the default was reduced.

    Raises:
        PlanError: an explicit size that does not divide the heads.
    """
    if requested > 0:
        bad = [h for h in heads if h % requested]
        if bad:
            raise PlanError(
                f"tensor parallel size {requested} does not divide the model's "
                f"{bad[0]} attention heads; choose one of {head_divisors(heads)} "
                "(--tp, KIMI_TENSOR_PARALLEL_SIZE)"
            )
        return requested, ""
    wanted = max(gpus, 1)
    size = max(n for n in head_divisors(heads) if n <= wanted)
    if size == wanted:
        return size, ""
    return size, f"{wanted} GPUs do not divide the attention heads; tensor parallel size {size}"


def check_parallel(*, tp: int, pp: int, dp: int, gpus: int, mode: str, cores: int) -> list[Finding]:
    """TP x PP x DP against the devices: GPUs in gpu mode, CPU cores in dev mode.

    vLLM places one worker per GPU (or per CPU core group in dev mode) for each
    tensor-parallel rank, pipeline stage and data-parallel engine, so it needs
    ``tp * pp * dp`` of them. Fewer: refused (vLLM would fail to place its
    workers after minutes of loading). More: a warning (GPUs left idle).
    Dev mode: pipeline parallelism fails for the tiny Idefics3 model
    (``docs/facts.md``, "Tensor parallel on the CPU"), so pp > 1 is refused.
    """
    need = tp * pp * dp
    sizes = f"--tp {tp} x --pp {pp} x --dp {dp}"
    settings = "KIMI_TENSOR_PARALLEL_SIZE, KIMI_PIPELINE_PARALLEL_SIZE, KIMI_DATA_PARALLEL_SIZE"
    if mode == "dev":
        findings = []
        if pp > 1:
            findings.append(
                Finding(
                    "pipeline parallel size must be 1 in dev mode: the tiny dev model has "
                    "no pipeline support in vLLM (--pp, KIMI_PIPELINE_PARALLEL_SIZE)",
                    refuse=True,
                )
            )
        if need > cores:
            findings.append(
                Finding(
                    f"{sizes} needs {need} CPU cores in dev mode, but {cores} are allowed; "
                    f"lower one of them ({settings})",
                    refuse=True,
                )
            )
        return findings
    if need > gpus:
        if pp == dp == 1:  # the sentence the single-axis case always had
            text = f"tensor parallel size {tp} needs {tp} GPUs, but {gpus} are visible"
        else:
            text = f"{sizes} needs {need} GPUs, but {gpus} are visible"
        return [
            Finding(
                f"{text} (nvidia-smi -L, CUDA_VISIBLE_DEVICES); lower {settings}",
                refuse=True,
            )
        ]
    if need < gpus:
        return [
            Finding(
                f"{sizes} uses {need} of the {gpus} visible GPUs; the other {gpus - need} stay "
                "idle (raise --dp, KIMI_DATA_PARALLEL_SIZE, for more engines)"
            )
        ]
    return []


def largest_image_tokens(in_token_limit: int) -> int:
    """The most prompt tokens one image within the patch budget takes on Kimi-VL.

    "Within the budget": ``(W // 14) * (H // 14) <= in_token_limit`` and no side
    above :data:`backend.images.MAX_SIDE`, which is what the app sends
    (:func:`backend.images.fit_to_budget`). Enumerates every patch grid ``h x w``
    at the pixel size that pads most (``14 * n + 13`` px per side) and counts it
    with :func:`backend.images.image_tokens`, the app's copy of vLLM's rule. Thin
    images pad most: for Thinking-2506 (16384 patches) a 489x6747 image takes
    18 x 241 = 4338 tokens (a 1792x1792 one 4096); for Instruct (4096 patches)
    the most is 1275. (An over-budget image from another client is scaled by
    vLLM with truncated sides and can come out a few tokens larger.)
    """
    # Imported here: backend.images loads Pillow, which a launch that plans no GPU
    # server (--ui-only, dev mode, the UI check) does not need.
    from backend.images import MAX_SIDE, PATCH_SIZE, image_tokens

    best = 0
    for h in range(1, min(in_token_limit, MAX_SIDE // PATCH_SIZE) + 1):
        w = in_token_limit // h
        height = min(PATCH_SIZE * h + PATCH_SIZE - 1, MAX_SIDE)
        width = min(PATCH_SIZE * w + PATCH_SIZE - 1, MAX_SIDE)
        best = max(best, image_tokens(width, height, in_token_limit))
    return best


def check_batched_tokens(batched: int, image_tokens_max: int) -> list[Finding]:
    """``--max-num-batched-tokens`` must hold the largest image.

    vLLM's encoder cache holds one step's worth of image tokens; an image larger
    than ``--max-num-batched-tokens`` is refused with an encoder-cache error
    (``docs/facts.md``, "Known failure kinds"). Text and smaller images still
    work, so this is a warning.
    """
    if batched >= image_tokens_max:
        return []
    return [
        Finding(
            f"--max-num-batched-tokens {batched} is below the largest image's "
            f"{image_tokens_max} tokens: vLLM will refuse such images with an encoder-cache "
            f"error; set KIMI_MAX_NUM_BATCHED_TOKENS to at least {image_tokens_max}"
        )
    ]


def check_images_fit(images: int, image_tokens_max: int, max_model_len: int) -> list[Finding]:
    """``--limit-mm-per-prompt`` images at their largest against ``--max-model-len``.

    The seed's flags, 64 images x up to 4225 tokens against 32768, cannot hold 64
    full-size images in one prompt. That works (the app leaves out older images
    until the prompt fits and says so in the chat), so it is a warning that gives
    the real number of full-size images a prompt can hold.
    """
    if images * image_tokens_max <= max_model_len:
        return []
    fit = max_model_len // image_tokens_max
    return [
        Finding(
            f"{images} images per prompt x up to {image_tokens_max} tokens each exceed the max "
            f"model length {max_model_len}: a prompt holds at most {fit} full-size images, and "
            "the app leaves out older images to fit (KIMI_MAX_IMAGES_PER_PROMPT, "
            "KIMI_MAX_MODEL_LEN)"
        )
    ]


def check_ports(busy: dict[int, str]) -> list[Finding]:
    """Refuse ports that something already listens on.

    Args:
        busy: port -> the setting that chose it, for each port found in use.
    """
    return [
        Finding(f"port {port} is already in use; choose another ({setting})", refuse=True)
        for port, setting in sorted(busy.items())
    ]


# Kimi-VL-A3B in bf16: the repositories' safetensors total about 33 GB (16.4 B
# parameters x 2 bytes; the H200 run loaded 30.65 GiB of weights: docs/facts.md,
# "vLLM on the H200 test machine").
KIMI_VL_WEIGHT_BYTES = 33 * 10**9


def check_disk(*, free_bytes: int, need_bytes: int, cached: bool, cache_dir: str) -> list[Finding]:
    """Free disk for the weights in the Hugging Face cache, unless already there.

    Args:
        free_bytes: free bytes on the file system of ``cache_dir``.
        need_bytes: bytes of the download (:data:`KIMI_VL_WEIGHT_BYTES`).
        cached: the model's weights are already in the cache.
        cache_dir: the Hugging Face hub cache (``HF_HOME``/``HF_HUB_CACHE``).
    """
    if cached or free_bytes >= need_bytes:
        return []
    return [
        Finding(
            f"the model download needs about {need_bytes / 1e9:.0f} GB but {cache_dir} has "
            f"{free_bytes / 1e9:.1f} GB free; free space or point HF_HOME at a larger disk",
            refuse=True,
        )
    ]


def parse_version(text: str) -> tuple[int, ...] | None:
    """``"0.32.0+cpu"`` -> ``(0, 32, 0)``; None if there is no leading number."""
    found = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in found.group(1).split(".")) if found else None


def check_vllm_version(installed: str | None, pinned: str) -> list[Finding]:
    """The installed vLLM against the pinned one (``requirements-vllm.txt``).

    Another version works as long as its flags do (launch.sh passes only flags
    its ``serve --help`` lists), so a mismatch is a warning.
    """
    if installed is None:
        return [Finding(f"could not tell this vLLM's version; launch.sh is tested with {pinned}")]
    if parse_version(installed) == parse_version(pinned):
        return []
    return [
        Finding(
            f"this vLLM is {installed}, launch.sh is tested with {pinned} (requirements-vllm.txt); "
            "flags it does not list are left out"
        )
    ]


# The first vLLM known to take ``stream_interval`` per chat completion request
# (vllm-project/vllm PR 49754, merged 2026-07; checked in 0.32.0's
# entrypoints/openai/chat_completion/protocol.py). 0.26 has only --stream-interval.
STREAM_INTERVAL_FIELD_SINCE = (0, 32)


def needs_stream_interval_flag(installed: str | None) -> bool:
    """True if this vLLM lacks the per-request ``stream_interval`` field.

    Then the server flag ``--stream-interval`` sets the chunk size for every
    request. An unknown version counts as lacking it (the flag is harmless:
    the larger of flag and field wins).
    """
    version = parse_version(installed or "")
    return version is None or version[:2] < STREAM_INTERVAL_FIELD_SINCE


def check_ui_exposure(*, host: str, users: int, allow_anonymous: bool) -> list[Finding]:
    """The chat UI beyond loopback needs sign-in (docs/security.md, "What sign-in adds").

    Args:
        host: ``KIMI_UI_HOST``.
        users: users configured (``backend.cli user list``; 0 if that fails).
        allow_anonymous: ``KIMI_ALLOW_ANONYMOUS``: open anyway, with a warning.
    """
    if is_loopback(host) or users > 0:
        return []
    if allow_anonymous:
        return [
            Finding(
                f"the chat UI listens on {host} with no sign-in (KIMI_ALLOW_ANONYMOUS=true): "
                "anyone who reaches this port can use the model and see uploads"
            )
        ]
    return [
        Finding(
            f"the chat UI would listen on {host} with no user to sign in: add one with "
            f"`{ADD_USER}` (or set KIMI_UI_HOST=127.0.0.1)",
            refuse=True,
        )
    ]


def check_router_host(host: str) -> list[Finding]:
    """vLLM's router beyond loopback (``KIMI_ROUTER_HOST``), for UI hosts elsewhere.

    The router (vllm-router 0.1.17) has no sign-in of its own: its ``--api-key`` is the key
    it sends to workers, and ``POST /add_worker`` and ``/remove_worker`` answer anyone
    (tried here with ``--api-key`` set, docs/scaling.md). Whoever reaches it can add a
    server of theirs as a worker and receive chats with the ``Authorization`` header the
    router forwards. So it may listen on one private address (RFC 1918, IPv6 ULA: a
    network the operator fences to the UI hosts), with a warning; never on every interface
    (``0.0.0.0``), a public address or a name.

    Returns:
        [] for loopback; one warning for a private address; one refusal otherwise.
    """
    if is_loopback(host):
        return []
    setting = "KIMI_ROUTER_HOST"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return [Finding(f"{setting}={host} is not an IP address: name this host's private "
                        "address (the router must not listen on what a name may resolve to)",
                        refuse=True)]  # fmt: skip
    if address.is_unspecified or not address.is_private or address.is_link_local:
        where = (
            "every interface"
            if address.is_unspecified
            else "a link-local address"
            if address.is_link_local
            else "a public address"
        )
        return [Finding(f"{setting}={host} would put vLLM's router on {where}: its admin API "
                        "(/add_worker) has no sign-in; name one private address of this host "
                        "(10.x, 172.16-31.x, 192.168.x, fd00::/8)", refuse=True)]  # fmt: skip
    return [
        Finding(
            f"vLLM's router listens on {host} ({setting}): its admin API (/add_worker, "
            "/remove_worker) has no sign-in, so only the UI hosts may reach that port "
            "(firewall it)"
        )
    ]


CHAINLIT_SETTINGS_TABLES: Final = ("run", "features", "ui", "project", "code")
"""Chainlit 2.12's ``ChainlitConfig`` (chainlit/config.py) is a pydantic-settings
``BaseSettings`` with no prefix: an environment variable named like one of these fields, in
any case, is read as that settings table, and a value that is not a JSON object stops the
chat UI with a ``SettingsError`` as it starts. tests/test_preflight.py holds the list against
the installed Chainlit."""


def check_chainlit_environment(environ: Mapping[str, str]) -> list[Finding]:
    """A refusal when ``environ`` (the launcher's environment, which the chat UI inherits)
    has a variable Chainlit would read as its own settings (:data:`CHAINLIT_SETTINGS_TABLES`),
    e.g. a shell's ``RUN``; said before vLLM starts, not after its load."""
    names = sorted(name for name in environ if name.lower() in CHAINLIT_SETTINGS_TABLES)
    if not names:
        return []
    return [
        Finding(
            f"the environment variable {', '.join(names)} is set, and Chainlit reads it as its "
            "own settings: the chat UI would stop as it starts; unset it "
            f"(`unset {' '.join(names)}`)",
            refuse=True,
        )
    ]


def restart_delay(quick_failures: int, *, base_s: float, max_s: float, give_up_after: int) -> float:
    """Seconds to wait before restarting vLLM, or -1 to give up.

    Args:
        quick_failures: consecutive runs that died soon after starting, this one
            included (>= 1).
        base_s: the first delay; it doubles with each quick failure (2, 4, 8 ...).
        max_s: the longest delay.
        give_up_after: stop restarting once this many quick failures happened.
    """
    if quick_failures >= give_up_after:
        return -1.0
    return float(min(max_s, base_s * 2 ** max(quick_failures - 1, 0)))


def split_memory_utilization(total: float, servers: int) -> float:
    """Each server's ``--gpu-memory-utilization`` when ``servers`` share the GPUs.

    Rounded down to 0.01 so that the shares never add up to more than ``total``.
    """
    return math.floor(total / servers * 100) / 100

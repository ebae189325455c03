"""Per-pod utilization traces for each behaviour, on the scenario's sample grid.

A trace has two views of the same activity:

* ``gauge`` — what an exporter reports at the scrape instant (NVML's utilization over its last
  sample period), i.e. what dcgm-exporter's ``DCGM_FI_DEV_GPU_UTIL`` shows;
* a two-component mixture per step (``frac_hi`` of the time around ``mean_hi``, the rest around
  ``mean_lo``) describing NVML's sub-second samples between scrapes — what gpu-exporter's
  ``gpu_utilization_samples_percent`` histogram counts.

The distinction is the point: sub-second DataLoader stalls average out in the gauge but stay
bimodal in the samples.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simulation.fleet.scenario import Behaviour

_SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class Trace:
    """Arrays aligned with the grid slice a pod lives on; utilization in percent (0-100)."""

    gauge: np.ndarray
    frac_hi: np.ndarray
    mean_hi: np.ndarray
    mean_lo: np.ndarray
    sd: float  # spread of sub-second samples around each component's mean
    cpu_frac: np.ndarray  # CPU use as a share of the pod's limit
    throttle_frac: np.ndarray  # share of CFS periods throttled
    loaded: np.ndarray  # 0..1: how much of the model is in GPU memory (ramps during warm-up)
    # Board power as a share of the board's limit; None: it follows utilization (0.1 + 0.85 × util).
    power_frac: np.ndarray | None = None
    # NVML's clock-event reasons bitmask; None: the exporter serves none for this GPU.
    clock_events: np.ndarray | None = None


def _flat(values: np.ndarray, sd: float, cpu: float, throttle: float) -> Trace:
    n = values.size
    return Trace(
        gauge=values,
        frac_hi=np.ones(n),
        mean_hi=values,
        mean_lo=np.zeros(n),
        sd=sd,
        cpu_frac=np.full(n, cpu),
        throttle_frac=np.full(n, throttle),
        loaded=np.ones(n),
    )


def _square_wave(rng: np.random.Generator, t0: float, t_end: float) -> tuple[np.ndarray, np.ndarray]:
    """Boundaries of alternating busy/stalled phases (busy first) and cumulative busy time at each."""
    # Phases of 1-3 minutes: longer than any common scrape interval, so the gauge sees both states.
    count = int((t_end - t0) / 60.0) + 4
    lengths = rng.uniform(60.0, 180.0, size=count)
    bounds = np.concatenate(([t0], t0 + np.cumsum(lengths)))
    busy = np.where(np.arange(count) % 2 == 0, lengths, 0.0)
    busy_cum = np.concatenate(([0.0], np.cumsum(busy)))
    return bounds, busy_cum


# Board power while a rank spins in an NCCL collective: an idle GPU holding a context and one
# resident kernel (about 150 W of an H100 SXM's 700 W), against 0.1 + 0.85 × utilization working.
WAIT_POWER = 0.21
IDLE_POWER = 0.1
# A synchronous checkpoint: rank 0 writes (its GPU near idle) while the others wait in the next
# all-reduce. Often: every 5 minutes for 2 (a few steps apart); rarely: every 2 hours for 3 minutes.
CHECKPOINT_OFTEN = (300.0, 120.0)
CHECKPOINT_RARE = (7200.0, 180.0)
SW_POWER_CAP = 0x4
POWER_CAP = 0.28  # an operator's 200 W cap on a 700 W board


@dataclass(frozen=True)
class Rank:
    """Where a pod sits in its job: its rank, the job's size, the job's shared random stream (every
    rank sees the same episodes) and, for a hung job, when its last rank dies."""

    rank: int = 0
    world: int = 1
    seed: int = 0
    stall_at: float | None = None


def _ddp(behaviour: Behaviour, rng: np.random.Generator, times: np.ndarray, r: Rank) -> Trace:
    """One rank of a data-parallel job: working at training power, or waiting in a collective."""
    n = times.size
    noise = rng.normal(0.0, 1.0, size=n)
    working = np.clip(93.0 + 3.0 * noise, 75.0, 100.0)
    spinning = np.clip(99.5 + 0.5 * noise, 98.0, 100.0)
    waits = np.zeros(n, dtype=bool)  # this rank spins, waiting on another
    lags = np.zeros(n, dtype=bool)  # this rank is the one the others wait on, off the GPU
    last = r.world - 1
    match behaviour:
        case Behaviour.DDP_CHECKPOINT_OFTEN | Behaviour.DDP_CHECKPOINT_RARE:
            period, length = (
                CHECKPOINT_OFTEN if behaviour is Behaviour.DDP_CHECKPOINT_OFTEN else CHECKPOINT_RARE
            )
            saving = np.mod(times, period) < length
            if r.rank == 0:
                lags = saving
            else:
                waits = saving
        case Behaviour.DDP_STRAGGLER:
            shared = np.random.default_rng(r.seed)
            block = 600.0
            first = float(times[0]) - float(times[0]) % block
            blocks = int((float(times[-1]) - first) // block) + 1
            late = shared.random(blocks) < 0.7
            who = shared.integers(0, r.world, size=blocks)
            lasts = shared.uniform(180.0, 360.0, size=blocks)
            idx = ((times - first) // block).astype(int)
            inside = (times - first - idx * block) < lasts[idx]
            episode = late[idx] & inside
            # The straggler computes its late step (busy, at power); the others wait for it.
            waits = episode & (who[idx] != r.rank)
        case Behaviour.DDP_HUNG:
            dead = times > (r.stall_at if r.stall_at is not None else np.inf)
            if r.rank == last:
                lags = dead
            else:
                waits = dead
    gauge = np.where(waits, spinning, np.where(lags, np.clip(2.0 + noise, 0.0, 5.0), working))
    power = np.where(waits, WAIT_POWER, np.where(lags, IDLE_POWER + 0.02, IDLE_POWER + 0.85 * gauge / 100.0))
    out = _flat(gauge, 3.0, cpu=0.55, throttle=0.02)
    return replace(out, power_frac=np.clip(power + rng.normal(0.0, 0.005, n), 0.05, 1.0))


def trace(
    behaviour: Behaviour,
    rng: np.random.Generator,
    times: np.ndarray,
    step_s: float,
    pod_start: float,
    warmup_s: float,
    rank: Rank | None = None,
) -> Trace:
    """The trace of one pod over ``times`` (unix seconds), warm-up included."""
    n = times.size
    if behaviour in _DDP:
        return _with_warmup(_ddp(behaviour, rng, times, rank or Rank()), times, pod_start, warmup_s)
    noise = rng.normal(0.0, 1.0, size=n)
    match behaviour:
        case Behaviour.TRAINING:
            out = _flat(np.clip(93.0 + 3.0 * noise, 75.0, 100.0), 3.0, cpu=0.55, throttle=0.02)
        case Behaviour.SERVING:
            # A daily traffic curve that never drops near idle.
            phase = 2 * np.pi * (times / _SECONDS_PER_DAY - 0.3)
            level = np.clip(57.0 + 18.0 * np.sin(phase) + 5.0 * noise, 35.0, 85.0)
            out = _flat(level, 4.0, cpu=0.45, throttle=0.01)
        case Behaviour.IDLE:
            # Health checks nudge the gauge to 1 % now and then; never above the 2 % idle line.
            out = _flat(np.where(rng.random(n) < 0.05, 1.0, 0.0), 0.4, cpu=0.01, throttle=0.0)
        case Behaviour.LOW_UTILIZATION:
            drift = 4.0 * np.sin(2 * np.pi * times / 7200.0)
            out = _flat(np.clip(14.0 + drift + 3.0 * noise, 6.0, 25.0), 2.5, cpu=0.15, throttle=0.0)
        case Behaviour.STARVATION_CPU:
            out = _flat(np.clip(45.0 + 4.0 * noise, 35.0, 58.0), 3.0, cpu=0.97, throttle=0.65)
        case Behaviour.STARVATION_SAWTOOTH:
            bounds, busy_cum = _square_wave(rng, pod_start, float(times[-1]) + step_s)
            cum = np.interp(times, bounds, busy_cum)
            prev = np.interp(times - step_s, bounds, busy_cum)
            frac = np.clip((cum - prev) / step_s, 0.0, 1.0)
            busy_now = (np.searchsorted(bounds, times, side="right") - 1) % 2 == 0
            gauge = np.where(
                busy_now, np.clip(95.0 + 2.0 * noise, 85.0, 100.0), np.clip(3.0 + noise, 0.0, 8.0)
            )
            out = Trace(
                gauge=gauge,
                frac_hi=frac,
                mean_hi=np.full(n, 95.0),
                mean_lo=np.full(n, 3.0),
                sd=2.0,
                cpu_frac=np.full(n, 0.7),
                throttle_frac=np.full(n, 0.1),
                loaded=np.ones(n),
            )
        case Behaviour.POWER_CAPPED_TRAINING:
            # Busy, but the board may draw no more than its cap: clocks drop, utilization stays.
            gauge = np.clip(95.0 + 2.0 * noise, 85.0, 100.0)
            out = replace(
                _flat(gauge, 3.0, cpu=0.55, throttle=0.02),
                power_frac=np.clip(POWER_CAP + rng.normal(0.0, 0.005, n), 0.05, 1.0),
                clock_events=np.full(n, float(SW_POWER_CAP)),
            )
        case Behaviour.SPIN_POLL:
            # A resident polling kernel: NVML reads 100 % while the board idles with its context.
            out = replace(
                _flat(np.clip(99.5 + 0.5 * noise, 98.0, 100.0), 0.5, cpu=0.2, throttle=0.0),
                power_frac=np.clip(WAIT_POWER - 0.02 + rng.normal(0.0, 0.005, n), 0.05, 1.0),
            )
        case Behaviour.STARVATION_SUBSECOND:
            frac = np.clip(0.5 + 0.04 * noise, 0.35, 0.65)
            gauge = frac * 95.0 + (1.0 - frac) * 3.0 + rng.normal(0.0, 1.5, size=n)
            out = Trace(
                gauge=np.clip(gauge, 0.0, 100.0),
                frac_hi=frac,
                mean_hi=np.full(n, 95.0),
                mean_lo=np.full(n, 3.0),
                sd=2.0,
                cpu_frac=np.full(n, 0.7),
                throttle_frac=np.full(n, 0.1),
                loaded=np.ones(n),
            )
    return _with_warmup(out, times, pod_start, warmup_s)


_DDP = frozenset(
    {
        Behaviour.DDP_CHECKPOINT_OFTEN,
        Behaviour.DDP_CHECKPOINT_RARE,
        Behaviour.DDP_STRAGGLER,
        Behaviour.DDP_HUNG,
    }
)


def _with_warmup(t: Trace, times: np.ndarray, pod_start: float, warmup_s: float) -> Trace:
    """Model loading: GPU at 0 %, memory filling up linearly, CPU busy reading weights."""
    if warmup_s <= 0:
        return t
    warming = times < pod_start + warmup_s
    if not warming.any():
        return t
    loaded = np.clip((times - pod_start) / warmup_s, 0.05, 1.0)
    return replace(
        t,
        gauge=np.where(warming, 0.0, t.gauge),
        frac_hi=np.where(warming, 1.0, t.frac_hi),
        mean_hi=np.where(warming, 0.0, t.mean_hi),
        mean_lo=t.mean_lo,
        sd=t.sd,
        cpu_frac=np.where(warming, 0.5, t.cpu_frac),
        throttle_frac=np.where(warming, 0.0, t.throttle_frac),
        loaded=np.where(warming, loaded, 1.0),
        power_frac=None if t.power_frac is None else np.where(warming, IDLE_POWER, t.power_frac),
    )


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7) without SciPy."""
    z = np.abs(x) / np.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    return 0.5 * (1.0 + np.sign(x) * erf)


def histogram_increments(
    frac_hi: np.ndarray,
    mean_hi: np.ndarray,
    mean_lo: np.ndarray,
    sd: float,
    samples_per_step: float,
    buckets: tuple[float, ...],
) -> tuple[np.ndarray, np.ndarray]:
    """Expected cumulative bucket counts (steps × buckets, last column +Inf) and sum per step."""
    les = np.asarray(buckets, dtype=float)[None, :]
    hi = normal_cdf((les - mean_hi[:, None]) / sd)
    lo = normal_cdf((les - mean_lo[:, None]) / sd)
    share = frac_hi[:, None] * hi + (1.0 - frac_hi[:, None]) * lo
    counts = np.concatenate((share, np.ones((frac_hi.size, 1))), axis=1) * samples_per_step
    sums = samples_per_step * (frac_hi * mean_hi + (1.0 - frac_hi) * mean_lo)
    return counts, sums

"""The run orders of bench/throughput_suite.py (bench/throughput_plan.py, made with bench/run_matrix.py),
each compared with the order the suite made before it used the run matrix, written out for a small
case."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import throughput_plan as tp
from throughput_plan import PEER, SLUICE, PeerConfig, SluiceConfig

A, B, C, D = SluiceConfig(1, 2, 2), SluiceConfig(2, 1, 2), SluiceConfig(2, 2, 2), SluiceConfig(2, 2, 4)
P1, P2, P3 = PeerConfig(2, 0, 1), PeerConfig(2, 40, 1), PeerConfig(4, 0, 2)


def test_the_sweep_runs_each_cluster_round_robin_among_its_share_of_the_peer_round_robin():
    # the peer round-robin: P1 P2 P3 | P3 P2 P1, in shares of 2 for the 3 clusters
    assert tp.sweep_order([A, B, C, D], [P1, P2, P3], 2) == [
        ((1, 2), [A, P1, A, P2]),
        ((2, 1), [B, P3, B, P3]),
        ((2, 2), [C, P2, D, D, P1, C]),  # C D | D C, spread among P2 P1
    ]


def test_the_sweep_with_more_peer_runs_than_the_shares_hold_evenly():
    # 4 peer runs over 3 clusters: shares of 2, 2 and none
    assert tp.sweep_order([A, B, C], [P1, P2], 2) == [
        ((1, 2), [A, P1, A, P2]),
        ((2, 1), [B, P2, B, P1]),
        ((2, 2), [C, C]),
    ]


def test_the_headline_runs_a_configuration_shared_by_two_pairs_once_per_round():
    pairs = [(A, P3, "best"), (A, PeerConfig(2, 20, 2), "matched")]
    p_m = pairs[1][1]
    assert tp.headline_order(pairs, 3) == [P3, A, p_m, p_m, A, P3, P3, A, p_m]


def test_the_headline_alternates_two_pairs_forward_and_backward():
    pairs = [(D, P3, "best"), (A, P1, "matched")]
    assert tp.headline_order(pairs, 2) == [D, P3, A, P1, P1, A, P3, D]
    assert tp.headline_order(pairs[:1], 3) == [D, P3, P3, D, D, P3]  # S P | P S | S P


def test_the_size_sweep_turns_the_systems_per_round_and_the_sizes_every_other_round():
    assert tp.size_order([1, 2, 3], 3) == [
        (1, SLUICE), (1, PEER), (2, SLUICE), (2, PEER), (3, SLUICE), (3, PEER),
        (3, PEER), (3, SLUICE), (2, PEER), (2, SLUICE), (1, PEER), (1, SLUICE),
        (1, SLUICE), (1, PEER), (2, SLUICE), (2, PEER), (3, SLUICE), (3, PEER),
    ]  # fmt: skip
    assert tp.size_order([5], 2) == [(5, SLUICE), (5, PEER), (5, PEER), (5, SLUICE)]

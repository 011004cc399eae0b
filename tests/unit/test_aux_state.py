"""Monitor streaks and the GenRM pairing RNG survive a checkpoint (rlcw.rl.aux_state)."""

from __future__ import annotations

from types import SimpleNamespace

from rlcw.measure.monitors import MonitorCallback
from rlcw.rewards.genrm import GenRMReward, group_comparisons
from rlcw.rl.aux_state import AUX_STATE_FILE, AuxStateCallback, load_aux_state, save_aux_state


def test_monitor_and_genrm_state_round_trip(tmp_path):
    monitor = MonitorCallback(stop={"max_words_mean": 10.0}, patience=3)
    monitor.observe(1, {"words_mean": 20.0})
    monitor.observe(2, {"words_mean": 30.0})  # streak 2 of 3: one more broken step stops the run
    genrm = GenRMReward("unused", mode="groupmates", k=1, num_generations=4, seed=5, scorer=object())
    group_comparisons(4, "groupmates", 1, genrm.rng)  # the run has drawn some pairings
    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    AuxStateCallback({"monitor": monitor, "reward/genrm": genrm}).on_save(
        SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(global_step=2, is_world_process_zero=True), None
    )
    assert (folder / AUX_STATE_FILE).is_file()
    want = group_comparisons(4, "groupmates", 1, genrm.rng)  # the uninterrupted run's next pairing

    fresh_monitor = MonitorCallback(stop={"max_words_mean": 10.0}, patience=3)
    fresh_genrm = GenRMReward("unused", mode="groupmates", k=1, num_generations=4, seed=5, scorer=object())
    assert load_aux_state(folder, {"monitor": fresh_monitor, "reward/genrm": fresh_genrm})
    assert group_comparisons(4, "groupmates", 1, fresh_genrm.rng) == want
    assert fresh_monitor.observe(3, {"words_mean": 40.0}) is not None  # stops at step 3, as without the restart
    assert not load_aux_state(tmp_path, {"monitor": fresh_monitor})  # a checkpoint without the file: nothing
    save_aux_state(tmp_path, {"monitor": fresh_monitor, "plain": object()})  # objects without state are skipped

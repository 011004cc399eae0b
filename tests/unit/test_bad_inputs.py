"""Every bad input rlcw is tested against, in one place: each is a clear error (RlcwError naming the
file/line/key with a hint, or an HTTP 4xx with a message) or a counted, named drop.

`n` is how many distinct bad inputs the row's test feeds (parametrized cases or corpus entries).
The test below checks that every row names a test that exists and that the total stays >= 60.

| n | area | bad input | outcome | tested in |
|---|---|---|---|---|
| 1 | data | broken JSON line in a jsonl file | error: file:line | tests/unit/test_io.py::test_read_jsonl_broken_line_names_file_and_line |
| 1 | data | file that is not UTF-8 | error: file:line, byte, iconv hint | tests/unit/test_io.py::test_read_jsonl_non_utf8_names_file_line_and_utf8 |
| 1 | data | empty file | error | tests/unit/test_io.py::test_read_jsonl_empty_file |
| 1 | data | missing file | error | tests/unit/test_io.py::test_read_jsonl_missing_file |
| 1 | data | a folder where a file is expected | error | tests/unit/test_io.py::test_read_jsonl_folder_is_an_error |
| 2 | data | a jsonl line that is not an object | error: file:line | tests/unit/test_io.py::test_read_jsonl_non_object_line |
| 1 | data | .json that is not a list | error | tests/unit/test_io.py::test_read_table_json_not_a_list |
| 1 | data | broken .json | error: file:line | tests/unit/test_io.py::test_read_table_broken_json_names_line |
| 1 | data | unsupported file type | error listing the types | tests/unit/test_io.py::test_read_table_unsupported_suffix |
| 1 | data | .json list of non-objects | error: file:row | tests/unit/test_io.py::test_read_table_json_list_of_non_objects_is_a_located_error |
| 10 | data | story record: null/number/blank story, list prompt, empty system, blank/null id, string step, bool seed, min_words > max_words | error: file:line:field | tests/unit/test_records.py::test_read_stories_bad_values_are_located |
| 4 | data | story record missing id / prompt / story / system | error: file:line:field | tests/unit/test_records.py::test_read_stories_missing_field_is_located |
| 1 | data | story meta not an object | error | tests/unit/test_records.py::test_story_meta_must_be_an_object |
| 5 | data | preference: null chosen, numeric rejected, blank chosen, chosen == rejected, meta not an object | error: file:line:field | tests/unit/test_records.py::test_validate_preference_bad_values_are_located |
| 3 | data | preference missing prompt / chosen / rejected | error: file:line:field | tests/unit/test_records.py::test_validate_preference_missing_field |
| 1 | data | preference CSV missing a column | error: column and row | tests/unit/test_records.py::test_load_preferences_csv_missing_column_names_column_and_row |
| 1 | data | conversational pair without an assistant turn | error | tests/unit/test_records.py::test_load_preferences_conversational_without_assistant_is_empty_error |
| 1 | data | preference table with no pairs | error | tests/unit/test_records.py::test_load_preferences_empty_table_is_an_error |
| 1 | data | curation: malformed rows and stories | counted drops by name | tests/unit/test_curate_rules.py::test_malformed_rows_and_stories_are_counted_by_name |
| 1 | data | curation: row of the other layout | error: file, row, key | tests/unit/test_curate_rules.py::test_layout_mismatch_names_file_row_and_key |
| 1 | data | curation where nothing survives | report.md written, then error pointing at it | tests/recipes/test_curate.py::test_curate_csv_with_list_strings_and_token_limit |
| 2 | data | UTF-8 byte-order mark in a csv / jsonl file | read transparently (the first header is not BOM + id) | tests/unit/test_input_hygiene.py::test_a_bom_in_csv_and_jsonl_is_read_transparently |
| 2 | data | UTF-8 byte-order mark in a YAML config / a chat template | read transparently | tests/unit/test_input_hygiene.py::test_a_bom_in_a_yaml_config_and_a_text_template_is_not_data |
| 2 | data | duplicate ids in a prompts file / a prompt column's id_column | error naming both lines | tests/unit/test_input_hygiene.py::test_duplicate_ids_in_a_prompts_file_name_both_lines |
| 1 | data | curation: rows dropped as malformed | the first rows per reason named file:line | tests/unit/test_input_hygiene.py::test_curation_names_the_first_dropped_rows_per_reason |
| 2 | data | a UTF-16 jsonl / csv (Excel "Unicode text") | error: file:1, UTF-16, the iconv / CSV UTF-8 fix | tests/unit/test_input_hygiene.py::test_a_utf16_file_is_named_with_the_re_encoding_fix |
| 1 | data | a semicolon-separated csv | error: file:1, the separator fix | tests/unit/test_input_hygiene.py::test_a_semicolon_separated_csv_is_named_with_the_separator_fix |
| 2 | config | a list key given with commas but no brackets (command line, YAML) | error naming the key and the bracketed form | tests/unit/test_input_hygiene.py::test_a_list_given_with_commas_but_no_brackets_names_the_key_and_the_brackets |
| 2 | config | nan / inf anywhere in a config | error naming the key | tests/unit/test_input_hygiene.py::test_non_finite_config_numbers_are_named_errors |
| 5 | config | reward weight nan, inf, text, bool, null | error naming reward.specs.<name>.weight | tests/unit/test_input_hygiene.py::test_a_reward_weight_must_be_a_finite_number |
| 1 | config | negative judge timeout | error naming client.timeout_s | tests/unit/test_input_hygiene.py::test_a_negative_judge_timeout_is_a_named_error |
| 1 | config | a tab in YAML indentation | error saying "tab" and its line | tests/unit/test_input_hygiene.py::test_a_yaml_tab_is_named |
| 3 | config | `train.lr`, `trainr.lr`, `train.steps` | hint names learning_rate / max_steps | tests/unit/test_input_hygiene.py::test_close_key_hints_know_common_aliases |
| 1 | config | `train.bs` | hint names train.batch_size | tests/unit/test_input_hygiene.py::test_bs_alias_names_batch_size |
| 2 | config | `--learning_rate 1e-5` (TRL habit), `--batch_size 4` (ambiguous) | mapped with a note / error naming both keys | tests/unit/test_input_hygiene.py::test_trl_style_flags_map_to_the_key_they_mean |
| 1 | config | a positional YAML path | error: use --config | tests/unit/test_input_hygiene.py::test_a_positional_yaml_path_is_told_to_use_config |
| 2 | config | `--config` given twice (both spellings) | error naming both files, not the last one read silently | tests/unit/test_input_hygiene.py::test_a_second_config_is_an_error_naming_both |
| 1 | config | misspelt config file | did-you-mean the closest file | tests/unit/test_input_hygiene.py::test_a_missing_config_file_suggests_the_closest |
| 23 | config | late failures (prompt + completion cap past the context window in grpo / generate, no RM yet, bad python target, option typo, resume=true on no run, judge server down or silent, a pairwise judge over one system, a judge script or template not found, ...) | exit 2, named error, no run folder | tests/recipes/test_late_failures.py::test_late_failure_exits_2_and_leaves_no_run_folder |
| 1 | config | train.report_to naming a tracker that is not installed | error naming the package; no folder | tests/unit/test_run_folders.py::test_a_tracker_that_is_not_installed_writes_nothing |
| 1 | config | a user error inside a run before any result | the new run folder is removed | tests/unit/test_run_folders.py::test_a_user_error_before_any_result_removes_the_new_folder |
| 19 | config | `train.max_steps` 0 or negative (grpo, ppo, dpo, train-rm, quickstart's grpo), `train.num_generations` 0 (grpo) or 1 (rloo), a negative learning rate (grpo, train-rm, ppo's policy and value), a batch or minibatch size of 0, a negative save or evaluation interval, a sampling temperature of 0 (ppo), a misspelt `model.dtype` / `train.lr_scheduler_type` (did-you-mean), a text for an int | error naming the key and the command line, with a hint, before torch is imported | tests/unit/test_cli_first_day.py::test_help_and_value_errors_answer_before_torch_is_imported |
| 15 | config | the same bounds and choices in configs loaded in code (grpo, rloo, ppo's steps, sizes, learning rates and temperature, dpo, train-rm) | error naming the key | tests/unit/test_cli_first_day.py::test_load_config_holds_every_bounded_key |
| 1 | config | a YAML value below its bound | error naming the file and the key | tests/unit/test_cli_first_day.py::test_a_yaml_value_out_of_range_names_the_file |
| 1 | config | `rlcw plan plan.gpus_per_node=0` | error naming the key before the recipe loads (was a division by zero) | tests/unit/test_cli_first_day.py::test_plan_refuses_zero_gpus_per_node_before_loading_the_recipe |
| 1 | config | a config built in code with a value below its bound | error before the run folder | tests/unit/test_run_guard.py::test_bounds_hold_for_a_config_built_in_code |
| 2 | config | output_dir that is a file; a run folder path that is a file | error naming output_dir; nothing written | tests/unit/test_run_guard.py::test_an_output_dir_that_is_a_file_is_named |
| 1 | config | output_dir that cannot be written | error naming output_dir; nothing written | tests/unit/test_run_guard.py::test_an_output_dir_that_cannot_be_written_is_named |
| 2 | config | $RLCW_CACHE read-only or a file when the embedded model must be converted | error naming $RLCW_CACHE; no run folder | tests/unit/test_run_guard.py::test_an_unwritable_cache_is_named_when_the_embedded_model_must_be_converted |
| 1 | config | `train.report_to=wandb` with wandb installed but not logged in | error with the login / offline hint; no run folder | tests/unit/test_run_guard.py::test_wandb_without_a_login_is_an_error_before_the_run_folder |
| 1 | config | serve-rm on a port another server holds | error naming the port, another port or stop that server; exit 2, no run folder | tests/unit/test_busy_port.py::test_serve_rm_on_a_busy_port_names_the_port_and_writes_nothing |
| 2 | config | serve-rm with port=70000; with token_env naming an unset variable | error naming the port (was an OverflowError traceback) / the variable, before the run folder | tests/unit/test_busy_port.py::test_serve_rm_with_a_port_out_of_range_or_an_unset_token_writes_nothing |
| 4 | config | model.name `smollm2`, `SmolLM2-135M`, `SmolLM2-135M-Instruct`, `smollm2_135m_instruct` | did-you-mean the alias, before any hub call | tests/unit/test_models.py::test_the_embedded_model_in_other_spellings_gets_did_you_mean_before_any_hub_call |
| 1 | config | a run folder given as model.name | error naming its checkpoints/final (or model/) | tests/unit/test_models.py::test_a_run_folder_given_as_a_model_names_its_model_folder |
| 1 | config | `model.name=<run>/checkpoints/final` of a run that has not finished (export after an interrupt) | error naming its status and the resume, before any run folder (was "model path does not exist" after the export folder was made) | tests/unit/test_run_guard.py::test_an_unfinished_run_given_as_the_model_names_its_status_and_the_resume_before_a_run_folder |
| 2 | config | a hub id that cannot be fetched: `HF_HUB_OFFLINE=1` and not cached (before the run folder), no network | one error naming the id, the offline variable and the download / local-folder fix (were 4 chained tracebacks and a folder left) | tests/unit/test_models.py::test_a_hub_model_that_cannot_be_fetched_is_one_named_error |
| 1 | data | `~/prompts.jsonl` kept literal by quotes or a YAML file | read from the home folder (was "file not found") | tests/unit/test_input_hygiene.py::test_a_home_folder_tilde_in_a_data_path_is_the_home_folder |
| 1 | config | a model folder with config.json but no weights | error naming the folder, before the run folder | tests/unit/test_models.py::test_a_model_folder_without_weights_is_named_before_loading |
| 1 | config | a run folder another process is writing | error naming the folder and the PID holding it | tests/unit/test_interrupts_and_locks.py::test_a_second_process_is_refused_and_a_killed_run_leaves_no_lock |
| 2 | config | `rlcw train-rm --check` with a missing data.train_file / data.eval_file | error naming the key, the file and build-pairs; nothing written | tests/unit/test_cli_first_day.py::test_check_of_train_rm_names_a_missing_pairs_file |
| 2 | config | a pairs folder (a build-pairs run) or a tab-separated file as data.train_file / data.eval_file | error naming the key and the file inside / the CSV fix, under `--check` too (was "not found" / config OK) | tests/unit/test_cli_first_day.py::test_a_pairs_folder_or_a_tab_separated_file_is_named_before_the_run |
| 2 | config | `--check` with a config its validate() refuses; with a missing RM | the same error as a run, nothing written | tests/unit/test_cli_first_day.py::test_check_validates_and_writes_nothing |
| 3 | data | a prompts CSV's word-range cells (text "30"), a `max_words` of "about 300", min_words > max_words | read as numbers / error naming the prompts file, row and field (was an error naming the run's own samples file) | tests/unit/test_input_hygiene.py::test_word_ranges_of_a_prompts_csv_are_numbers_and_a_bad_cell_names_the_prompts_file |
| 1 | data | a split the prompts file lacks (`data.split=validation`) | error listing the file's splits | tests/unit/test_input_hygiene.py::test_a_split_the_prompts_file_lacks_lists_the_splits_it_has |
| 1 | data | a prompt whose tokens + the completion cap pass the model's context window | error naming the prompt, its length, the cap key; data.fit_to_cap=filter drops it | tests/unit/test_input_hygiene.py::test_a_prompt_past_the_context_window_is_named_or_filtered |
| 2 | data | stories longer than the RM's max_length | counted (share), one warning above 5% | tests/unit/test_input_hygiene.py::test_inputs_cut_to_the_rm_max_length_are_counted_and_warned_once |
| 1 | config | `rlcw ppo --help` piped into `head` (the reader leaves early) | no traceback, exit 141 | tests/unit/test_cli.py::test_help_into_a_closed_pipe_ends_quietly |
| 1 | config | unknown YAML key | error: key, file, closest keys | tests/unit/test_config.py::test_unknown_yaml_key_names_key_file_and_suggestion |
| 1 | config | unknown key=value override | error naming the command line | tests/unit/test_config.py::test_unknown_key_on_command_line_names_command_line |
| 1 | config | misspelt section | error: full key + suggestion | tests/unit/test_config.py::test_misspelt_section_names_full_key_and_suggests |
| 1 | config | scalar given for a section | error | tests/unit/test_config.py::test_scalar_for_a_section_names_the_section |
| 1 | config | wrong type | error: key + expected type | tests/unit/test_config.py::test_wrong_type_names_key_and_expected_type |
| 1 | config | missing config file | error | tests/unit/test_config.py::test_missing_config_file |
| 1 | config | YAML whose top level is not a mapping | error | tests/unit/test_config.py::test_yaml_top_level_must_be_a_mapping |
| 1 | config | unparsable YAML | error | tests/unit/test_config.py::test_unparsable_yaml_is_an_rlcw_error |
| 1 | config | override without '=' | error | tests/unit/test_config.py::test_malformed_override_without_equals |
| 1 | config | unknown reward type | error listing the types | tests/unit/test_reward_factory.py::test_unknown_type_lists_the_types |
| 1 | config | unknown reward option | error listing the valid ones | tests/unit/test_reward_factory.py::test_unknown_option_names_the_option_and_the_valid_ones |
| 3 | config | reward spec missing rm_path / urls, no reward left | error | tests/unit/test_reward_factory.py::test_missing_required_option_and_empty_set |
| 1 | config | two rewards with one name | error | tests/unit/test_reward_factory.py::test_duplicate_names_are_rejected |
| 1 | config | train.resume=yes | error listing false/true/auto | tests/unit/test_runs_resume.py::test_resume_mode_rejects_other_words |
| 1 | config | train.resume=true with no checkpoint | error with hint | tests/unit/test_runs_resume.py::test_resume_true_without_checkpoint_is_an_error_auto_starts_fresh |
| 1 | config | a run_name whose folder holds another run | error naming what it holds; folder untouched | tests/unit/test_run_folders.py::test_a_used_run_folder_is_refused_and_left_untouched |
| 1 | config | overwrite=true with train.resume=true | error | tests/unit/test_run_folders.py::test_overwrite_and_resume_true_contradict |
| 3 | config | a learning rate that makes the logged loss or reward nan / inf (grpo, rloo, dpo, train-rm) | run ends failed: "training diverged", exit 1 | tests/unit/test_diverged_runs.py::test_a_non_finite_loss_or_reward_ends_the_run |
| 1 | config | train-rm with lr 1e30 (the loss becomes nan) | summary failed, `rlcw: failed:`, exit 1 | tests/recipes/test_train_rm.py::test_a_loss_that_becomes_nan_ends_the_run_failed_with_exit_1 |
| 1 | config | train-rm with lr 1e8 (finite loss, nan weights) | summary failed, no model saved, not DONE | tests/recipes/test_train_rm.py::test_an_rm_whose_weights_diverged_ends_failed_not_done |
| 3 | config | an RM whose held-out rewards are all one value (0, -250) or nan | "the reward model is dead", failed | tests/recipes/test_train_rm.py::test_dead_rm_names_constant_or_non_finite_rewards |
| 2 | config | a resume (train.resume=true/auto) with a changed learning rate and batch size | error listing each key old -> new, the train.resume=changed hint; folder untouched | tests/unit/test_run_folders.py::test_a_resume_that_changes_the_experiment_is_refused_naming_old_and_new |
| 1 | config | unknown study evaluator option | error listing the options | tests/unit/test_study_evaluator.py::test_unknown_option_is_an_error |
| 1 | config | unknown evaluator name | error listing the known ones | tests/unit/test_evaluation_registry.py::test_unknown_name_lists_the_known_ones |
| 1 | config | broken rlcw_rm.json | error naming the file | tests/unit/test_render.py::test_load_spec_broken_json_is_an_rlcw_error |
| 1 | config | missing remote token env / non-http URL | error | tests/unit/test_remote_reward.py::test_missing_token_env_and_bad_urls_are_errors |
| 1 | config | outcome gold.rm_path that does not exist | error naming gold.rm_path | tests/unit/test_outcome_measure.py::test_gold_from_any_sequence_classification_folder |
| 3 | config | outcome: a pool of 1 sample, eval_fraction 1, a proxy of 0 pairs | error naming the key | tests/recipes/test_validate.py::test_bad_config_fails_validation_before_anything_heavy |
| 1 | judge | a judge run over fewer than 20 prompts | warning "only N prompts: the interval is wide ..." in the log and report.md | tests/recipes/test_judge.py::test_a_handful_of_prompts_is_warned_in_the_log_and_the_report |
| 1 | judge | `rlcw agreement` over fewer than 20 rated items | the same warning under the table | tests/unit/test_agreement.py::test_a_handful_of_rated_items_is_warned_under_the_table |
| 1 | data | quickstart's held-out measurement over fewer than 20 prompts | the same warning above the held-out table | tests/recipes/test_quickstart.py::test_heldout_table_warns_when_a_handful_of_prompts_carries_the_intervals |
| 1 | judge | hedged, conflicting or unknown pairwise verdicts | invalid, counted, never a tie | tests/unit/test_judge_parsing.py::test_preference |
| 1 | judge | unparsable Likert replies | invalid, counted | tests/unit/test_judge_parsing.py::test_likert |
| 1 | judge | unparsable Yes/No replies | invalid, counted | tests/unit/test_judge_parsing.py::test_yes_no |
| 1 | judge | side-by-side JSON with conflicts | invalid dimensions counted | tests/unit/test_judge_parsing.py::test_side_by_side_json_and_conflicts |
| 1 | judge | side-by-side reply with no verdict | invalid | tests/unit/test_judge_parsing.py::test_side_by_side_nothing_and_subwords |
| 5 | study | unknown item id, item answered twice, unanswered items, failed attention check, unknown label | one error listing each, file named | tests/unit/test_study_ingest.py::test_bad_answers_are_errors_naming_the_file |
| 2 | study | missing dimension; item answered in a foreign packet | error | tests/unit/test_study_ingest.py::test_missing_dimension_and_foreign_packet |
| 1 | study | tampered key | error: checksum | tests/unit/test_study_design.py::test_key_checksum_detects_tampering |
| 1 | study | answers of another study (study_id mismatch) | error naming both study ids | tests/recipes/test_study.py::test_ingest_refuses_answers_of_another_study |
| 23 | server | broken/empty JSON, non-UTF-8, lone surrogate, NaN, Infinity, deep nesting (x3), huge body, non-object, wrong types (x3), missing/unknown field, length mismatch, empty lists, oversize list, oversize item, missing token, wrong token, empty Idempotency-Key | 4xx with a message; the server answers after each | tests/integration/test_reward_server_limits.py::test_malformed_request_corpus_gets_clear_4xx_and_the_server_lives_on |
| 1 | server | chunked upload past the body limit | 413 before the upload ends | tests/integration/test_reward_server_limits.py::test_a_chunked_upload_is_stopped_at_the_limit |
| 1 | server | a story that breaks the scorer, merged with good requests | 500 for that request only | tests/integration/test_reward_server_limits.py::test_a_failing_merged_batch_fails_only_the_bad_request |
| 1 | server | Idempotency-Key reused with another body | 422 | tests/integration/test_reward_server_limits.py::test_idempotency_key_scores_a_retried_request_once |
| 6 | server | garbage answers to the client: not JSON, wrong length, non-number, NaN, wrong field, 503 | RlcwError after retries, never a reward | tests/unit/test_remote_reward.py::test_garbage_or_server_errors_raise_after_retries |
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| (\d+) \| (\w+) \| .+ \| (tests/\S+\.py)::(\w+) \|$")


def _rows() -> list[tuple[int, str, str, str]]:
    rows = []
    for line in __doc__.splitlines():
        m = ROW.match(line)
        if m:
            rows.append((int(m.group(1)), m.group(2), m.group(3), m.group(4)))
    return rows


def test_the_table_names_tests_that_exist():
    rows = _rows()
    assert len(rows) == sum(1 for line in __doc__.splitlines() if line.startswith("| ") and "::" in line)
    for _, _, path, name in rows:
        text = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^def {name}\(", text, re.M), f"{path}::{name} is not a test there"


def test_at_least_sixty_bad_inputs_across_every_area():
    rows = _rows()
    assert sum(n for n, *_ in rows) >= 60
    assert {area for _, area, *_ in rows} == {"data", "config", "judge", "study", "server"}

"""The test tiers, decided in one place (the root conftest applies them): the slow tier is tests/system/; the unit
tier is every other test that needs no Ray, no server and no training over a second. A test is unit unless it or
its module is declared in NOT_UNIT under the reason, or it asks for a fixture that starts Ray, a server or training.
`python -m pytest -q -m unit` runs the tier under the guards of `UnitGuard`: a unit test that imports ray, leaves a
process running (a server) or spends more than `CPU_BUDGET_S` of CPU fails with what to do."""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SYSTEM = TESTS / "system"

# fixtures that start Ray, a server or a training run; a test asking for one (or for a fixture built on one: pytest's
# closure lists those too) is left out of the unit tier
HEAVY_FIXTURES = frozenset({"ray_cluster", "s3_server", "trained_federation"})

# tests left out of the unit tier, by why: a module relative to tests/ (all its tests; a unit run does not import it),
# one test, "module::name" (all its parameters), or one case of a test, "module::name[parameters]"
NOT_UNIT: dict[str, frozenset[str]] = {
    "imports ray (Tune's API, or a raytune_fl module that does: tune.outcome, tune.search, ablation.run)": frozenset(
        {
            "cli/test_bad_inputs.py",  # its module fixture warms tune.manifest up, which imports ray
            "cli/test_console.py::test_a_command_run_with_its_output_piped_gets_rays_worker_lines_plain",
            "cli/test_ray_job_paths.py::test_a_relative_optuna_storage_and_ablates_default_out_are_refused",
            "test_plugins.py::test_a_plugin_method_whose_build_raises_exits_2_naming_the_variant_and_the_line",
            "tracking/test_background_writer.py::test_the_tune_callback_pickles_without_its_thread",
            "tune/test_uncertainty.py::test_summarise_adds_the_selected_trials_standard_error",
            "tune/test_warm_start_searcher.py",
            "ablation/test_ablation.py",
            "ablation/test_collapsed_cells.py",
            "ablation/test_partition_seeds.py",
            "actors/test_faults.py",
            "cli/test_next_steps.py",
            "cli/test_progress.py",
            "cli/test_tune_summary.py",
            "engine/test_federation.py",
            "export/test_model_helper.py",
            "runtime/test_optuna_storage.py",
            "runtime/test_storage.py",
            "tune/test_edges.py",
            "tune/test_interrupt.py",
            "tune/test_objectives.py",
            "tune/test_outcome_counts.py",
            "tune/test_pbt.py",  # and trains: a PBT restart and its replay, 4 rounds each
            "tune/test_samplers.py",
            "tune/test_refusal.py",
            "tune/test_search.py",
        }
    ),
    "collects the unit tier in a process of its own: it checks the tier from outside": frozenset(
        {"source/test_unit_tier.py"}
    ),
    "trains: a federation's rounds, a method's harness, a bit-for-bit comparison of runs (over a second)": frozenset(
        {
            "data/test_download.py::test_download_true_fetches_a_real_format_archive_from_a_local_server_and_trains_on_it",
            "data/test_hf.py::test_an_experiment_on_a_parquet_file_builds_its_federation_and_trains_a_round",
            "engine/test_flwr_rounds.py::test_a_flwr_split_trains_two_rounds",
            "engine/test_local.py::test_a_size_one_final_batch_is_skipped",
            "engine/test_privacy.py::test_a_central_federation_reports_the_accountants_epsilon_every_round_within_its_target",
            "engine/test_privacy.py::test_a_central_federation_resumed_from_its_checkpoint_ends_with_the_same_model",
            "engine/test_one_loop.py::test_a_nan_term_stops_both_loops",
            "engine/test_precision.py::test_bf16_evaluation_is_close_to_fp32_and_keeps_float64_losses",
            "engine/test_precision.py::test_bf16_is_the_autocast_loop_bit_for_bit",
            "engine/test_precision.py::test_bf16_training_stays_within_the_measured_tolerance_of_fp32",
            "engine/test_precision.py::test_every_matrix_op_of_the_stacked_step_runs_in_bf16",
            "engine/test_precision.py::test_fp32_evaluation_is_the_plain_forward_bit_for_bit",
            "engine/test_precision.py::test_fp32_is_the_plain_loop_bit_for_bit",
            "engine/test_precision.py::test_loss_terms_see_float32_outputs",
            "engine/test_protocol.py::test_a_client_trains_at_its_rounds_rate",
            "engine/test_protocol.py::test_batchnorm_local_clients_resume_from_their_own_statistics",
            "engine/test_system.py::test_a_round_nobody_reports_leaves_the_model_unchanged",
            "engine/test_system.py::test_a_step_budget_is_exact_across_passes",
            "engine/test_system.py::test_dropouts_lateness_and_budgets_are_recorded_and_reproducible",
            "engine/test_system.py::test_fedbuff_runs_asynchronously_with_recorded_staleness",
            "engine/test_traffic.py::test_batched_clients_upload_what_one_at_a_time_do",
            "engine/test_traffic.py::test_fedavg_uploads_its_parameters_and_buffers",
            "engine/test_traffic.py::test_fedbuff_counts_the_buffered_updates_of_each_round",
            "engine/test_traffic.py::test_fedpac_also_uploads_its_class_statistics",
            "engine/test_traffic.py::test_only_the_clients_that_reported_count",
            "engine/test_traffic.py::test_qffl_also_uploads_its_loss",
            "engine/test_traffic.py::test_scaffold_also_uploads_its_control_variate_change",
            "methods/test_fedalign.py::test_hooks_leave_the_forward_unchanged",
            "methods/test_fedalign.py::test_simple_cnn_block_shapes_and_channels",
            "methods/test_fedpac.py::test_a_body_phase_leaves_the_classifier_untouched",
            "methods/test_fedpac.py::test_a_classifier_phase_trains_the_classifier_only_and_keeps_the_bodys_statistics",
            "methods/test_fedpac.py::test_a_client_reports_statistics_of_the_received_body_and_class_means_of_the_trained_one",
            "methods/test_fedpac.py::test_a_phase_with_the_run_settings_is_the_one_phase_loop_bit_for_bit",
            "methods/test_fedpac.py::test_a_returning_client_trains_from_its_own_classifier_and_aligns_to_the_broadcast_centroids",
            "methods/test_fedpac.py::test_phases_run_in_order_and_a_term_is_averaged_over_the_steps_it_was_on",
            "methods/test_fedpac.py::test_simplex_qp_matches_brute_force_over_every_support",
            "methods/test_moon.py::test_moon_first_round_is_zero_and_state_is_the_trained_model",
            "methods/test_moon.py::test_moon_mu_zero_is_fedavg_bit_for_bit",
            "methods/test_qffl.py::test_qffl_end_to_end_q_zero_trains_and_aggregates_as_fedavg",
            "methods/test_qffl.py::test_qffl_hook_reports_the_global_models_loss_and_restores_train_mode",
            "methods/test_regularizers.py::test_a_regularizer_changes_the_update",
            "methods/test_regularizers.py::test_zero_coefficients_give_exactly_fedavgs_update",
            "methods/test_scaffold.py::test_scaffold_state_round_trips_with_partial_participation",
            "models/test_simple_cnn.py::test_simple_cnn_matches_the_workload_model",
            "config/test_config.py::test_every_client_of_a_shipped_space_takes_a_local_step",
            "testing/test_testing.py::test_fingerprints_compare_values_exactly_and_objects_by_their_attributes",
            "conformance/test_datasets.py::test_a_dataset_loads_to_the_array_contract_or_names_its_missing_root",
            "conformance/test_methods.py",
            "conformance/test_models.py::test_a_model_returns_logits_and_a_representation_and_learns",
            "data/test_data.py::test_mnist5k_follows_workload_permutation",
            "data/test_domains.py::test_mnist5k_rotated",
            "data/test_partitioners.py::test_heatmap_png",
            "data/test_synthetic.py::test_a_cnn_learns_it_in_150_sgd_steps",
            "data/test_synthetic.py::test_learnable_well_above_chance_but_not_trivially",
            "engine/test_chance.py::test_a_run_that_learned_nothing_ends_collapsed_and_one_that_learned_does_not",
            "engine/test_checkpoint.py::test_a_new_study_keeps_the_previous_study_record",
            "engine/test_checkpoint.py::test_a_restored_federation_continues_exactly",
            "engine/test_client_batch.py::test_a_float32_run_with_batched_clients_learns_as_the_sequential_one",
            "engine/test_client_batch.py::test_batched_clients_draw_the_sequential_batches",
            "engine/test_client_batch.py::test_the_gradient_probe_on_batched_clients_equals_the_sequential_one",
            "engine/test_client_batch.py::test_the_gradient_probe_leaves_batched_training_unchanged_bit_for_bit",
            "engine/test_client_batch.py::test_batched_clients_equal_sequential_ones_through_a_checkpoint",
            "engine/test_client_batch_cap.py::test_the_capped_client_batch_trains_exactly_as_the_one_given",
            "engine/test_diagnostics.py::test_diagnostics_can_be_switched_off",
            "engine/test_diagnostics.py::test_fedbn_is_also_scored_with_each_clients_own_batchnorm",
            "engine/test_diagnostics.py::test_gradient_norms_are_logged_on_the_costly_rounds_and_leave_training_unchanged",
            "engine/test_diagnostics.py::test_the_round_driver_reports_cheap_diagnostics_every_round_and_costly_ones_every_k",
            "engine/test_eval_every.py::test_the_rounds_between_evaluations_train_exactly_as_when_every_round_is_evaluated",
            "engine/test_feature_shift.py::test_augmentation_changes_training_and_off_is_the_default",
            "engine/test_gpu_methods.py::test_a_seed_replays_bit_for_bit_on_the_cpu",
            "engine/test_gpu_methods.py::test_the_comparison_sees_a_different_run",
            "engine/test_one_loop.py::test_both_loops_train_on_the_same_plan_from_the_same_seeds",
            "engine/test_partial_sums.py::test_a_round_of_partial_sums_gives_the_per_client_model_within_float_summation",
            "engine/test_personal_scores.py::test_fine_tuning_changes_the_scored_models_but_never_the_global_ones",
            "engine/test_partial_sums.py::test_later_rounds_drift_only_as_float_noise_does",
            "engine/test_partial_sums.py::test_the_decomposition_rounds_keep_each_clients_delta",
            "engine/test_precision.py::test_bf16_reaches_fp32_accuracy_on_digits",
            "engine/test_precision.py::test_fp16_is_the_grad_scaler_loop_bit_for_bit_and_float32",
            "engine/test_precision.py::test_fp16_stacked_skips_exactly_the_overflowing_clients_steps",
            "engine/test_precision.py::test_the_stacked_step_in_bf16_matches_the_sequential_one",
            "engine/test_protocol.py::test_batchnorm_mean_changes_the_statistics_only",
            "engine/test_protocol.py::test_batchnorm_running_statistics_in_local_training_never_move",
            "engine/test_protocol.py::test_the_loop_takes_the_steps_it_is_told",
            "engine/test_schedules.py::test_a_checkpoint_round_trip_continues_as_the_straight_run",
            "engine/test_schedules.py::test_a_federation_restored_from_its_last_round_runs_no_further",
            "engine/test_schedules.py::test_the_engine_matches_the_frozen_driver",
            "methods/test_fedbabu.py::test_fedbabu_passes_check_method",
            "methods/test_fedbn.py::test_fedbn_clients_keep_their_own_batchnorm_across_partial_rounds",
            "methods/test_feddecorr.py::test_beta_zero_is_the_base_method_and_a_zero_base_term_is_feddecorr_bit_for_bit",
            "methods/test_feddyn.py::test_a_restored_federation_continues_exactly",
            "methods/test_feddyn.py::test_avg_model_is_scored_each_round_and_survives_a_checkpoint",
            "methods/test_feddyn.py::test_client_and_server_state_survive_a_checkpoint_and_the_next_round_is_identical",
            "methods/test_feddyn.py::test_fedavg_only_with_alpha_zero_without_the_correction_and_equal_sample_counts",
            "methods/test_feddyn.py::test_first_round_equals_fedprox_with_mu_alpha_bit_for_bit",
            "methods/test_fedld.py::test_no_margin_and_no_principal_is_fedavg",
            "methods/test_fedopt.py::test_a_restored_federation_continues_exactly",
            "methods/test_fedpac.py::test_a_restored_federation_continues_exactly_with_mixed_classifiers_and_centroids",
            "methods/test_fedper.py::test_a_returning_client_trains_from_its_own_head_and_a_non_participant_keeps_it",
            "methods/test_fedper.py::test_fedper_passes_check_method",
            "methods/test_fedrep.py::test_fedrep_at_a_head_rate_of_its_own_passes_check_method",
            "methods/test_fedrep.py::test_the_head_phase_leaves_the_body_untouched_and_the_body_phase_the_head",
            "methods/test_qffl.py::test_qffl_at_its_defaults_learns_in_twenty_rounds",
            "runtime/test_local_cluster.py",
            "test_plugins.py::test_the_same_method_with_its_state_in_state_dict_passes_the_check",
            "testing/test_testing.py::test_a_hook_counting_rounds_in_an_attribute_fails_naming_it",
            "testing/test_testing.py::test_a_tensor_in_state_dict_cannot_be_checkpointed",
            "testing/test_testing.py::test_an_attribute_that_carries_nothing_passes_once_called_transient",
            "testing/test_testing.py::test_every_example_passes_check_method",
            "testing/test_testing.py::test_server_momentum_in_an_attribute_fails_and_passes_once_state_dict_carries_it",
            "testing/test_testing.py::test_stacked_clients_that_share_a_hooks_tensor_fail_the_client_batch_check",
            "testing/test_testing.py::test_state_in_a_module_global_fails_though_no_attribute_holds_it",
            "test_weights.py::test_it_copies_what_load_state_dict_copies_into_the_models_own_tensors",
            "test_weights.py::test_weights_that_do_not_fit_get_load_state_dicts_error_naming_the_key",
            "tune/test_divergence.py",
            "tune/test_per_setting.py",
        }
    ),
    "runs a command or an import check in a fresh Python (its imports alone take over a second)": frozenset(
        {
            "cli/test_console.py::test_the_entry_point_runs_a_command_in_a_fresh_process",
            "cli/test_light_driver.py::test_the_driver_checks_every_search_space_without_importing_torch",
            "cli/test_ray_job_paths.py::test_a_jobs_runtime_env_that_clashes_with_the_plugins_is_refused_by_name",
            "cli/test_reproduce.py::test_the_paper_spaces_are_found_in_the_package_from_a_folder_outside_the_repository",
            "data/test_files.py::test_a_bad_npz_exits_2_before_ray_naming_the_field",
            "engine/test_sgd.py::test_training_a_client_never_imports_torch_dynamo",
            "source/test_light_imports.py::test_importing_it_imports_no_torch",
            "test_plugins.py::test_a_bad_plugin_on_the_command_line_exits_2_before_ray",
            "test_plugins.py::test_a_plugin_method_that_loses_its_state_on_a_resume_is_refused_before_ray",
            "tooling/test_bench_harness.py::test_bench_workload_on_cuda_without_a_gpu_says_so_instead_of_waiting",
            "tooling/test_docs.py::test_the_generator_imports_no_torch",
            "tooling/test_gpu_check.py::test_without_cuda_it_says_so_and_exits_2_before_running_anything",
            "tooling/test_module_map.py::test_the_committed_map_is_the_generated_one",
            "tracking/test_records.py::test_the_records_import_neither_mlflow_nor_torch",
        }
    ),
    "builds ResNet-18/50 models and runs their blocks (over a second of CPU)": frozenset(
        {
            "models/test_resnet_augment.py::test_resnet_smallest_image",
            "methods/test_fedalign.py::test_a_client_round_on_the_workload_model_logs_the_gap_and_leaves_no_hooks",
            "methods/test_fedalign.py::test_full_width_gives_a_zero_gap_and_finite_gradients",
            "methods/test_fedalign.py::test_full_width_slice_is_the_block_forward",
            "methods/test_fedalign.py::test_reduced_width_touches_only_its_slices",
            "methods/test_fedalign.py::test_resnet_block_is_layer4",
            "methods/test_fedalign.py::test_the_official_scale_logs_the_gap_and_scales_its_gradient_by_ce_over_the_gap",
            "methods/test_fedalign.py::test_the_terms_gradient_reaches_only_the_sliced_final_block",
            "methods/test_fedalign.py::test_transmitting_matrix_worked_example",
            "models/test_resnet_augment.py::test_resnet_shapes",
            "models/test_resnet_augment.py::test_resnet_structure",
        }
    ),
    "builds the docs site, or runs the cluster scripts and benchmarks as commands": frozenset(
        {
            "tooling/test_cluster_recipes.py::test_the_jobs_page_commands_parse",
            "tooling/test_gpu_check.py::test_a_child_that_fails_or_hangs_gives_its_tail_and_is_ended",
            "tooling/test_bench_cross_device.py::test_the_cross_device_space_has_pfl_researchs_cifar10_shape",
            "tooling/test_bench_cross_device.py::test_the_plain_and_inprocess_ways_run_a_tiny_protocol",
            "tooling/test_bench_harness.py::test_measure_sums_the_pss_of_grandchildren_and_reads_the_report",
            "tooling/test_bench_harness.py::test_scaling_gives_every_client_the_same_work_and_samples_only_the_participants",
            "tooling/test_bench_harness.py::test_the_reference_loop_and_the_engine_run_the_same_workload",
            "tooling/test_bench_harness.py::test_the_reference_loop_trains_one_round_like_workload_md",
            "tooling/test_bench_methods.py::test_a_tiny_benchmark_runs_every_listed_method",
            "tooling/test_bench_natural_clients.py::test_the_data_and_both_ways_configs",  # parquet through datasets
            "tooling/test_bench_methods.py::test_the_client_batch_ceiling_benchmark_times_both_ways",
            "tooling/test_cluster_recipes.py::test_a_broken_slurm_script_is_refused",
            "tooling/test_cluster_recipes.py::test_the_slurm_script_starts_a_head_workers_and_a_server_then_runs_valid_commands",
            "tooling/test_docs.py::test_a_broken_link_or_anchor_fails_the_strict_build",
            "tooling/test_docs.py::test_the_site_builds_strictly",
        }
    ),
    "builds real MLflow stores (their sqlite migrations take seconds)": frozenset(
        {
            "report/test_comparison.py::test_on_every_committed_page_an_interval_excludes_0_exactly_where_the_cell_is_called",
            "report/test_gradients.py::test_histories_are_read_from_mlflow_round_by_round",
            "report/test_results_pages.py::test_a_changed_run_makes_its_page_stale_until_regenerated",
            "report/test_results_pages.py::test_every_committed_page_is_what_its_runs_give",
            "tooling/test_bench_search.py::test_the_landscape_section_draws_logged_grid_runs",
            "tooling/test_mlflow_ui.py::test_a_study_experiment_is_marked_model_training_and_a_kind_set_by_hand_is_kept",
            "tracking/test_collapsed_status.py::test_a_trial_run_is_tagged_collapsed_when_its_last_round_is_at_chance",
            "tracking/test_new_store.py",
            "tune/test_warm_start.py::test_an_mlflow_study_gives_its_best_finished_configurations",
            "tracking/test_partition_record.py",
            "tracking/test_replay.py::test_a_replayed_round_is_logged_again_only_when_its_values_differ",
            "tracking/test_system_metrics.py::test_the_tracker_logs_them_at_the_round_and_keeps_them_out_of_the_round_table",
        }
    ),
    "scans every module of the package, the tests or the docs (seconds of parsing)": frozenset(
        {
            "source/test_errors.py::test_every_error_of_the_package_derives_from_raytune_fl_error",
            "source/test_layering.py::test_every_module_keeps_to_the_layering",
            "source/test_layering.py::test_the_package_never_imports_the_tooling_beside_it",
            "source/test_metric_names.py::test_no_module_restates_a_metric_name",
            "source/test_test_layout.py::test_every_registry_has_its_conformance_module",
            "source/test_test_layout.py::test_test_modules_import_no_other_test_module",
            "source/test_test_layout.py::test_the_tiers_are_decided_in_one_place_and_no_test_marks_itself",
            "tooling/test_module_map.py::test_every_module_of_the_package_has_a_docstring",
            "tooling/test_module_map.py::test_the_map_has_a_line_for_every_module_and_folder_of_the_package",
        }
    ),
}

# package modules no unit test module imports (tests/source/test_unit_tier.py requires one for every other module),
# by why not
NOT_COVERED: dict[str, frozenset[str]] = {
    "a method, built by name through the METHODS registry: tests/methods/ reach it, and none imports it": frozenset(
        {
            "raytune_fl.methods.fedadagrad",
            "raytune_fl.methods.fedadam",
            "raytune_fl.methods.fedalign",
            "raytune_fl.methods.fedavg",
            "raytune_fl.methods.fedavgm",
            "raytune_fl.methods.fedavgm_decorr",
            "raytune_fl.methods.fedbn",
            "raytune_fl.methods.fedbuff",
            "raytune_fl.methods.feddecorr",
            "raytune_fl.methods.feddyn",
            "raytune_fl.methods.fedgh",
            "raytune_fl.methods.fedld",
            "raytune_fl.methods.fednova",
            "raytune_fl.methods.fedpac",
            "raytune_fl.methods.fedprox",
            "raytune_fl.methods.fedprox_decorr",
            "raytune_fl.methods.feduv",
            "raytune_fl.methods.fedyogi",
            "raytune_fl.methods.freeze",
            "raytune_fl.methods.impl",
            "raytune_fl.methods.impl.fedavgm",
            "raytune_fl.methods.impl.feddyn",
            "raytune_fl.methods.impl.fedgh",
            "raytune_fl.methods.impl.fedopt",
            "raytune_fl.methods.impl.feduv",
            "raytune_fl.methods.impl.freeze",
            "raytune_fl.methods.impl.univarfl",
            "raytune_fl.methods.moon",
            "raytune_fl.methods.moon_decorr",
            "raytune_fl.methods.qffl",
            "raytune_fl.methods.scaffold",
            "raytune_fl.methods.univarfl",
        }
    ),
    "its tests import ray (Ray actors, Tune's API, raytune_fl.tune.outcome) or run a study: the fast tier": frozenset(
        {
            "raytune_fl.ablation.run",
            "raytune_fl.ablation.trainable",
            "raytune_fl.runtime.optuna_storage",
            "raytune_fl.tune",
            "raytune_fl.actors",
            "raytune_fl.actors.client",
            "raytune_fl.actors.pool",
            "raytune_fl.cli.progress",
            "raytune_fl.export",
            "raytune_fl.export.model_helper",
            "raytune_fl.export.trial_model",
            "raytune_fl.tracking.models",
            "raytune_fl.tune.edges",
            "raytune_fl.tune.events",
            "raytune_fl.tune.importance",
            "raytune_fl.tune.pbt",
            "raytune_fl.tune.refusal",
            "raytune_fl.tune.search",
            "raytune_fl.tune.study",
            "raytune_fl.tune.trainable",
            "raytune_fl.tune.tuner",
        }
    ),
    "its tests train a federation's rounds: the fast tier": frozenset(
        {
            "raytune_fl.engine.schedules",
        }
    ),
    "reached only through a command, a store or a run of the fast tier: no unit test of its own yet": frozenset(
        {
            "raytune_fl.report.page",
            "raytune_fl.report.paper_protocols",
            "raytune_fl.tracking.new_store",
        }
    ),
}

# a unit test's CPU time (setup and call, this process and the processes it waited for): "no training over a
# second", with room for the first import of a library (mlflow: about a second) and torch's second thread
CPU_BUDGET_S = 3.0


def declared_not_unit() -> dict[str, str]:
    """Every NOT_UNIT entry with its reason."""
    return {entry: reason for reason, entries in NOT_UNIT.items() for entry in entries}


def declared_not_covered() -> dict[str, str]:
    """Every NOT_COVERED module with its reason."""
    return {module: reason for reason, modules in NOT_COVERED.items() for module in modules}


def is_unit(nodeid: str, fixture_names: list[str]) -> bool:
    """A test (its pytest id, "tests/<module>::<name>[<parameters>]") is unit when it lives outside tests/system/,
    neither its module nor itself is declared in NOT_UNIT, and it asks for none of the HEAVY_FIXTURES."""
    case = nodeid.removeprefix("tests/")
    test = case.split("[")[0]
    module = test.split("::")[0]
    declared = declared_not_unit()
    if module.startswith("system/") or module in declared or test in declared or case in declared:
        return False
    return not HEAVY_FIXTURES.intersection(fixture_names)


def skipped_in_unit_run(path: Path) -> bool:
    """Paths a unit run does not even import: the slow tier's, and the modules NOT_UNIT declares whole."""
    return path == SYSTEM or SYSTEM in path.parents or path.relative_to(TESTS).as_posix() in declared_not_unit()


def _cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _live_children() -> list[str]:
    import psutil

    lines = []
    for child in psutil.Process().children(recursive=True):
        try:
            lines.append(" ".join(child.cmdline())[:160] or child.name())
        except psutil.Error:  # ended meanwhile
            continue
    return lines


@dataclass
class UnitGuard:
    """What a unit test may not do, checked around each one in a `-m unit` run."""

    cpu_at_setup: float = 0.0
    ray_before: bool = False

    def before(self) -> None:
        """Called as a test's setup starts."""
        self.cpu_at_setup, self.ray_before = _cpu_seconds(), "ray" in sys.modules

    def broken_rule(self) -> str | None:
        """The rule the test broke in its setup and call (checked after the call), or None."""
        spent = _cpu_seconds() - self.cpu_at_setup
        fix = "make it cheaper, or declare its module in tests/support/tiers.py NOT_UNIT with the reason"
        if "ray" in sys.modules and not self.ray_before:
            return f"the unit tier imports no ray, and this test (or its module or fixtures) did: {fix}"
        children = _live_children()
        if children:
            return f"the unit tier starts no server, and this test left processes running {children}: {fix}"
        if spent > CPU_BUDGET_S:
            return f"the unit tier trains for no more than a second: this test spent {spent:.1f} s of CPU: {fix}"
        return None

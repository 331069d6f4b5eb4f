// The `fp8rl` command: one binary, subcommands per job.
#include <fmt/format.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>

#include "bench/bench_suites.h"
#include "cli/demo.h"
#include "core/check.h"
#include "io/child_process.h"
#include "report/report_job.h"
#include "core/communicator.h"
#include "jobs/generate_job.h"
#include "jobs/grpo.h"
#include "jobs/model_source.h"
#include "jobs/recipe.h"
#include "jobs/sft_job.h"

namespace {

// A recipe-driven subcommand: `fp8rl NAME RECIPE.yaml [key.path=value ...]`.
struct RecipeCommand {
  CLI::App* app = nullptr;
  std::string recipe;
  std::vector<std::string> overrides;
};

RecipeCommand add_recipe_command(CLI::App& app, const char* name, const char* help) {
  RecipeCommand c;
  c.app = app.add_subcommand(name, help);
  return c;
}

void add_recipe_arguments(RecipeCommand& c) {
  c.app->add_option("recipe", c.recipe, "recipe YAML file")->required();
  c.app->add_option("overrides", c.overrides, "dotted overrides, e.g. sft.max_num_steps=100");
}

// Loads the recipe and overrides into `config`; returns the effective configuration as YAML.
std::string load_recipe(const RecipeCommand& c, fp8rl::ConfigSchema& schema, fp8rl::RunConfig& config) {
  fp8rl::bind_run_config(schema, config);
  schema.load(c.recipe, c.overrides);
  return schema.to_yaml();
}

// `fp8rl generate`'s recipe: --recipe (or the defaults), its overrides, then the flags that set
// one generation.* key each.
struct GenerateFlags {
  std::string recipe;
  std::vector<std::string> overrides;
  std::string checkpoint;
  std::map<std::string, std::string> values;  // flag -> value as given
  bool no_batch_invariant = false;
};

const fp8rl::RunConfig& load_generate_recipe(const GenerateFlags& f, fp8rl::ConfigSchema& schema,
                                             fp8rl::RunConfig& config) {
  fp8rl::bind_run_config(schema, config);
  std::vector<std::string> overrides = f.overrides;
  if (f.recipe.empty()) overrides.insert(overrides.begin(), "generation.max_new_tokens=16");
  if (!f.checkpoint.empty()) {
    overrides.push_back("model.name=null");
    overrides.push_back("model.checkpoint=" + f.checkpoint);
  }
  const std::pair<const char*, const char*> keys[] = {
      {"--max-new-tokens", "generation.max_new_tokens"}, {"--temperature", "generation.temperature"},
      {"--top-p", "generation.top_p"}, {"--top-k", "generation.top_k"}, {"--precision", "generation.precision"},
      {"--kv-cache-dtype", "generation.kv_cache_dtype"}};
  for (const auto& [flag, key] : keys)
    if (const auto v = f.values.find(flag); v != f.values.end() && !v->second.empty())
      overrides.push_back(std::string(key) + "=" + v->second);
  if (f.no_batch_invariant) overrides.push_back("generation.batch_invariant=false");
  if (f.recipe.empty())
    schema.load_overrides(overrides);
  else
    schema.load(f.recipe, overrides);
  return config;
}

}  // namespace

namespace {

// Under an MPI launcher: join the job's world and, unless FP8RL_NUM_THREADS says otherwise, give
// each process its share of the machine's CPUs (before the kernel pool first starts).
const fp8rl::dist::Communicator& join_world(int* argc, char*** argv) {
  fp8rl::dist::init_world(argc, argv);
  const fp8rl::dist::Communicator& comm = fp8rl::dist::world();
  if (comm.size() > 1 && std::getenv("FP8RL_NUM_THREADS") == nullptr)
    setenv("FP8RL_NUM_THREADS", std::to_string(fp8rl::dist::default_threads_per_process(comm)).c_str(), 1);
  return comm;
}

// Ctrl-C, SIGTERM, SIGHUP: the plug-in workers and sandboxes go first (their process groups are
// killed), then the process ends as the signal's default action would. A run directory keeps
// its last whole checkpoint, as after any interruption.
void on_stop_signal(int sig) {
  fp8rl::kill_all_children();
  // write(2) of constant strings only: nothing else is safe in a signal handler.
  const char* name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
  for (const char* part : {"\nfp8rl: stopped by ", name, "; plug-in workers ended; a run continues with --resume\n"})
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, part, std::strlen(part));
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &action, nullptr);
}

// An error on any rank ends the whole job (the others may be waiting for it in a collective);
// the last checkpoint is whole, as after any failure.
int fail(const fp8rl::dist::Communicator& comm, const char* what) {
  fmt::print(stderr, "fp8rl: {}error: {}\n", comm.label(), what);
  std::fflush(stderr);
  if (comm.size() > 1) comm.abort(1);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const fp8rl::dist::Communicator& comm = join_world(&argc, &argv);
  install_stop_handlers();
  CLI::App app{"fp8rl: reinforcement-learning post-training with end-to-end FP8"};
  app.require_subcommand(1);

  int64_t demo_elements = 4 << 20;
  CLI::App* demo = app.add_subcommand("demo", "Quantize a random tensor in every scaling mode and print the errors");
  demo->add_option("--elements", demo_elements, "number of tensor elements (rows of 1024)")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30));

  fp8rl::bench::BenchOptions bench_options;
  std::string suite;
  CLI::App* bench = app.add_subcommand("bench", "Run a benchmark suite and compare it with the machine's limits");
  bench->add_option("suite", suite, "suite to run")->required()->check(CLI::IsMember({"numerics", "kernels", "model", "generate", "memory", "reward"}));
  bench->add_flag("--json", bench_options.json, "one JSON object per line");
  bench->add_option("--repeats", bench_options.repeats, "timed runs per case (median reported)")
      ->check(CLI::Range(1, 1000));
  bench->add_option("--mib", bench_options.mib, "working-set size of streaming cases in MiB")
      ->check(CLI::Range(int64_t{1}, int64_t{16384}));
  bench->add_option("--cases", bench_options.groups,
                    "generate: comma-separated groups to run (decode, prefill, peer, long, capacity, large); "
                    "default all");
  bench->add_option("--preset", bench_options.preset,
                    "model/generate: the model's shape, a preset (qwen3-0.6b, llama-3.2-1b, medium, ...)");
  bench->add_option("--model", bench_options.model_dir,
                    "model/generate: the shape of this Hugging Face directory's config.json (random weights)");
  bench->add_option("--batch", bench_options.batch, "model: sequences per training step")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  bench->add_option("--seq", bench_options.seq, "model: tokens per sequence; memory: the longest (then /2, /4, /8)")->check(CLI::Range(int64_t{2}, int64_t{40960}));
  bench->add_flag("--checkpointing", bench_options.checkpointing, "model: per-layer activation checkpointing");
  bool bench_check = false;
  bench->add_flag("--check", bench_check, "memory: exit with status 1 unless peak memory is linear in sequence length");
  bool bench_quick = false;
  bench->add_flag("--quick", bench_quick, "model/generate: tiny preset and short runs (smoke test)");

  RecipeCommand sft = add_recipe_command(app, "sft", "Supervised warm start on a task's (prompt, answer) pairs");
  RecipeCommand eval = add_recipe_command(app, "eval", "Greedy validation accuracy of model.checkpoint");
  RecipeCommand config = add_recipe_command(app, "config", "Print the effective configuration of a recipe");
  RecipeCommand train = add_recipe_command(app, "train", "GRPO training (the RL loop)");
  bool config_help = false, resume = false;
  for (RecipeCommand* c : {&sft, &eval, &config, &train}) add_recipe_arguments(*c);
  train.app->add_flag("--resume", resume, "continue the run in logger.log_dir from its last checkpoint");
  int64_t stop_after = 0;
  train.app->add_option("--stop-after", stop_after, "end this invocation after N steps (with a checkpoint)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  config.app->add_flag("--help-fields", config_help, "print each field's type, default and help too");

  fp8rl::GenerateJobOptions gen;
  GenerateFlags gen_flags;
  CLI::App* generate = app.add_subcommand(
      "generate", "Sample from a checkpoint with a recipe's generator (default: BF16) and print the log-probs");
  generate->add_option("--recipe", gen_flags.recipe,
                       "run the generator this recipe describes (a run's config.yaml reproduces its generator)");
  generate->add_option("overrides", gen_flags.overrides, "dotted overrides of the recipe, e.g. generation.top_k=20");
  generate->add_option("--checkpoint", gen_flags.checkpoint, "model directory (default: the recipe's model.name or "
                                                             "model.checkpoint)");
  generate->add_option("--prompt", gen.prompt, "prompt text, e.g. \"123+456=\"")->required();
  generate->add_option("-n,--num-samples", gen.num_samples, "samples")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  generate->add_option("--seed", gen.seed, "sampling seed");
  // Each of these sets its generation.* key, after the recipe and its overrides.
  const std::pair<const char*, const char*> generation_flags[] = {
      {"--max-new-tokens", "generation.max_new_tokens: longest response (default 16 without --recipe)"},
      {"--temperature", "generation.temperature (0: greedy)"},
      {"--top-p", "generation.top_p: nucleus mass"},
      {"--top-k", "generation.top_k (0: off)"},
      {"--precision", "generation.precision: generator linears, bf16 or fp8"},
      {"--kv-cache-dtype", "generation.kv_cache_dtype: bf16 or fp8"}};
  for (const auto& [flag, help] : generation_flags) generate->add_option(flag, gen_flags.values[flag], help);
  generate->add_flag("--no-batch-invariant", gen_flags.no_batch_invariant,
                     "generation.batch_invariant=false: a lone sample may decode on a faster path (bits differ from "
                     "the trainer's in the last place)");
  generate->add_flag("--json", gen.json,
                     "one JSON object per sample: prompt_ids, response_ids, text, logprobs, finish_reason "
                     "(docs/generation.md)");
  generate->add_flag("--experts", gen.experts, "with --json, MoE models: the experts of every position and layer");

  // `fp8rl score`: the same generator (or the trainer), teacher-forced over given responses.
  fp8rl::ScoreJobOptions score_options;
  GenerateFlags score_flags;
  CLI::App* score = app.add_subcommand(
      "score", "Print the log-probs of given responses under a recipe's generator (or --trainer), one JSON line each");
  score->add_option("input", score_options.input,
                    "JSONL file: {\"prompt\": text, \"response\": text} or {\"prompt_ids\": [...], \"response_ids\": "
                    "[...]} per line (generate --json's output is one)")
      ->required();
  score->add_option("overrides", score_flags.overrides, "dotted overrides of the recipe");
  score->add_option("--recipe", score_flags.recipe, "the recipe whose generator (or trainer) scores");
  score->add_option("--checkpoint", score_flags.checkpoint, "model directory (default: the recipe's)");
  score->add_flag("--trainer", score_options.trainer,
                  "the trainer's log-probs (policy.* precision, temperature 1) instead of the generator's");
  for (const auto& [flag, help] : generation_flags)
    if (std::string_view(flag) != "--max-new-tokens") score->add_option(flag, score_flags.values[flag], help);
  score->add_flag("--no-batch-invariant", score_flags.no_batch_invariant, "generation.batch_invariant=false");

  std::string export_from, export_to, export_format = "bf16";
  fp8rl::PrecisionPolicy export_policy;
  export_policy.linear = fp8rl::Precision::kFP8;
  bool export_pow2 = false;
  CLI::App* export_cmd = app.add_subcommand("export", "Write a checkpoint as a Hugging Face directory, in BF16 or FP8");
  export_cmd->add_option("from", export_from, "model directory (a checkpoint, or any HF directory fp8rl loads)")->required();
  export_cmd->add_option("to", export_to, "directory to write (a new or empty one; --force replaces one)")->required();
  bool export_force = false;
  export_cmd->add_flag("--force", export_force, "replace `to` if it exists and is not empty (never the source)");
  export_cmd->add_option("--format", export_format, "bf16, or fp8 (E4M3 weights, 128x128 weight_scale_inv)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  export_cmd->add_option("--bf16-first-layers", export_policy.num_first_layers_in_bf16, "fp8: first layers kept in BF16");
  export_cmd->add_option("--bf16-last-layers", export_policy.num_last_layers_in_bf16, "fp8: last layers kept in BF16");
  export_cmd->add_flag("--pow2-scales", export_pow2, "fp8: power-of-two weight scales");

  std::vector<std::string> report_dirs;
  std::string report_output = "report.html";
  CLI::App* report = app.add_subcommand("report", "Compare runs in one self-contained HTML page");
  report->add_option("run_dirs", report_dirs, "run directories (logger.log_dir of each run)")->required();
  report->add_option("-o,--output", report_output, "the HTML file to write");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and exit 0; a usage error prints its message and exits 1, as
    // every other error does (not the parser's own codes).
    const int rc = app.exit(e);
    fp8rl::dist::finalize_world();
    return rc == 0 ? 0 : 1;
  }
  try {
    // Without a chosen KV budget (no --recipe, no generation.kv_cache_bytes override) generate and
    // score size it to the request.
    const auto kv_budget_chosen = [](const GenerateFlags& f) {
      return !f.recipe.empty() ||
             std::any_of(f.overrides.begin(), f.overrides.end(),
                         [](const std::string& o) { return o.starts_with("generation.kv_cache_bytes="); });
    };
    if (comm.size() > 1 && !*train.app && !*sft.app)
      throw fp8rl::Error("only `train` and `sft` run on several processes; run this command without mpirun");
    fp8rl::ConfigSchema schema;
    fp8rl::RunConfig run;
    if (*generate) {
      gen.size_kv_cache_to_request = !kv_budget_chosen(gen_flags);
      fp8rl::run_generate_job(load_generate_recipe(gen_flags, schema, run), gen);
    }
    if (*score) {
      score_options.size_kv_cache_to_request = !kv_budget_chosen(score_flags);
      fp8rl::run_score_job(load_generate_recipe(score_flags, schema, run), score_options);
    }
    if (*sft.app) fp8rl::run_sft_job(run, load_recipe(sft, schema, run));
    if (*train.app) fp8rl::run_grpo_job(run, load_recipe(train, schema, run), resume, stop_after);
    if (*eval.app) {
      load_recipe(eval, schema, run);
      fmt::print("validation accuracy: {:.4f}\n", fp8rl::run_eval_job(run));
    }
    if (*config.app) {
      load_recipe(config, schema, run);
      fmt::print("{}", config_help ? schema.to_yaml(/*with_help=*/true) : schema.to_yaml());
    }
    if (*report) fp8rl::report::run_report_job(report_dirs, report_output);
    if (*export_cmd) {
      if (export_pow2) export_policy.weight_scale_format = fp8rl::ScaleFormat::kPow2;
      fp8rl::export_model_directory(export_from, export_to,
                                    export_format == "fp8" ? fp8rl::DType::kE4M3 : fp8rl::DType::kBF16,
                                    export_policy, export_force);
    }
    if (*demo) fp8rl::cli::run_demo(demo_elements);
    if (*bench && suite == "numerics") fp8rl::bench::run_numerics_bench(bench_options);
    if (*bench && suite == "kernels") fp8rl::bench::run_kernels_bench(bench_options);
    if (*bench && suite == "model") fp8rl::bench::run_model_bench(bench_options, bench_quick);
    if (*bench && suite == "generate") fp8rl::bench::run_generate_bench(bench_options, bench_quick);
    if (*bench && suite == "memory") return fp8rl::bench::run_memory_bench(bench_options, bench_check);
    if (*bench && suite == "reward") fp8rl::bench::run_reward_bench(bench_options);
  } catch (const std::exception& e) {
    return fail(comm, e.what());
  }
  fp8rl::dist::finalize_world();
  return 0;
}

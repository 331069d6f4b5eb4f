// The `fp8rl` command: one binary, subcommands per job.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <exception>

#include "bench/bench_suites.h"
#include "cli/demo.h"
#include "core/check.h"

int main(int argc, char** argv) {
  CLI::App app{"fp8rl: reinforcement-learning post-training with end-to-end FP8"};
  app.require_subcommand(1);

  int64_t demo_elements = 4 << 20;
  CLI::App* demo = app.add_subcommand("demo", "Quantize a random tensor in every scaling mode and print the errors");
  demo->add_option("--elements", demo_elements, "number of tensor elements (rows of 1024)")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30));

  fp8rl::bench::BenchOptions bench_options;
  std::string suite;
  CLI::App* bench = app.add_subcommand("bench", "Run a benchmark suite and compare it with the machine's limits");
  bench->add_option("suite", suite, "suite to run")->required()->check(CLI::IsMember({"numerics"}));
  bench->add_flag("--json", bench_options.json, "one JSON object per line");
  bench->add_option("--repeats", bench_options.repeats, "timed runs per case (median reported)")
      ->check(CLI::Range(1, 1000));
  bench->add_option("--mib", bench_options.mib, "working-set size of streaming cases in MiB")
      ->check(CLI::Range(int64_t{1}, int64_t{16384}));

  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo) fp8rl::cli::run_demo(demo_elements);
    if (*bench && suite == "numerics") fp8rl::bench::run_numerics_bench(bench_options);
  } catch (const fp8rl::Error& e) {
    fmt::print(stderr, "fp8rl: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "fp8rl: error: {}\n", e.what());
    return 1;
  }
  return 0;
}

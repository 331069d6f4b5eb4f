// Model-written Python, run in the sandbox (tasks/sandbox.h): a built-in reward and a built-in
// environment tool.
//
// task.reward.builtin: python_tests. Each example's data holds
//   "tests": [{"call": "f(2)", "expected": "5"}, ...]       ("expected": the repr of the value)
// The response's code (its last ```python ... ``` block, else all of it) runs in the sandbox under
// a harness that then evaluates each call and prints the repr of its value (null if it raised) on
// a channel of its own (the code's own prints go to stderr). fp8rl compares those with the
// expected reprs outside the sandbox: the expected values never enter it, so code cannot claim a
// pass it did not earn. reward = the fraction of calls that match; metrics: tests_passed (the same
// fraction), all_passed, timed_out, crashed (no result at all).
//
// task.environment.builtin: python. A model turn that ends with <python>CODE</python> (the stop
// string) gets the sandboxed program's stdout back as the observation (and, if it failed, how,
// with the end of its stderr), at most 2,000 bytes; a turn without such a block ends the sample.
#pragma once

#include <memory>

#include "tasks/environment.h"
#include "tasks/reward.h"
#include "tasks/sandbox.h"

namespace fp8rl {

// The code of a response: the last ```python (or ```) fenced block's content, else the response.
std::string python_code_of(std::string_view response);

std::unique_ptr<RewardFunction> make_python_tests_reward(const SandboxLimits& limits, int64_t parallel);

std::unique_ptr<Environment> make_python_tool_environment(const SandboxLimits& limits, int64_t parallel);

}  // namespace fp8rl

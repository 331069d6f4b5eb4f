// Multi-turn generation: what the engine asks of whoever answers a sample's turns (rl/ connects
// it to an environment plug-in, tasks/environment.h). After each sampled token the engine asks
// whether the sample's turn ended; if so it submits the sample and goes on decoding the others.
// An answer either ends the sample or gives observation tokens, which the engine prefills into
// the sample's KV pages (they are in its response, marked, never sampled) before it samples the
// model's next turn from the logits after them.
//
// The engine never waits for an answer while another sample can decode: it polls without
// waiting, and waits only when every running sample is waiting for one. Which tokens a sample
// gets does not depend on when answers arrive (its random stream is keyed by its own token
// count, and with generation.batch_invariant each row's bits do not depend on the batch).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fp8rl {

class TurnHandler {
 public:
  virtual ~TurnHandler() = default;

  // Whether the token just appended to sequence `sequence`'s response ends its turn (the turn
  // began at `response[turn_begin]`). The end-of-sequence token always does, without a call.
  virtual bool ends_turn(int64_t sequence, std::span<const int32_t> response, size_t turn_begin) = 0;
  // The turn of `sequence` (prompt p, sample g: p * G + g) ended with `response` so far; start
  // working on the answer and return at once.
  virtual void submit(int64_t sequence, std::span<const int32_t> response) = 0;

  struct Answer {
    int64_t sequence = 0;
    bool done = false;                 // the sample ends here
    std::vector<int32_t> observation;  // otherwise: appended to the response, then the model goes on
  };
  // The answers that arrived since the last call; with `wait`, blocks until there is one.
  virtual std::vector<Answer> poll(bool wait) = 0;
};

}  // namespace fp8rl

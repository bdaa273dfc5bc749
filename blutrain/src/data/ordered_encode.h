// ordered_encode.h (internal): documents encoded by several threads, delivered in document order
// (Note [Parallel tokenize] in blutrain/data.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "blutrain/tokenizer.h"

namespace blu::train {

// Calls `slice` with consecutive pieces of document i. Called from several threads at once for
// different documents when jobs > 1.
using DocumentReader = std::function<void(size_t i, const std::function<void(std::string_view)>& slice)>;

// For i = 0 .. n_docs - 1 in order: begin(i), then emit(ids) with document i's ids in order (any
// number of calls), exactly the ids one TextStreamEncoder gives for it. jobs <= 1: one thread,
// streamed. jobs > 1: this thread encodes the document it is at, jobs - 1 others encode the next
// ones (at most 2 x jobs ahead) into spill files under spill_dir (made and removed here), each with
// its own Tokenizer::copy(); a document's error is thrown here when its turn comes, after the other
// threads stopped and every spill file is gone.
void encode_in_order(const Tokenizer& tok, size_t n_docs, const DocumentReader& read, int jobs,
                     const std::string& spill_dir, const std::function<void(size_t i)>& begin,
                     const std::function<void(std::span<const int32_t>)>& emit);

}  // namespace blu::train

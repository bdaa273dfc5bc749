// cache_install.h (internal): builds a data cache directory so that concurrent processes never see
// it half-written (Note [Atomic data caches]).
#pragma once

#include <functional>
#include <string>

namespace blu::train {

// Note [Atomic data caches]
// Several processes may build the same first-use cache at once: the ranks of separate gangs, tests
// run in parallel by ctest on a fresh clone (CI, session 15: two tests wrote data/cache/
// corpus_vocab/data from different sources at the same time, and one read the other's token ids:
// "token 0 has id 3197, outside the model's vocabulary [0, 25)"). So a cache is written into a
// staging directory of its own beside `dir` and put in place with one rename. Just before, `valid`
// looks at `dir` again: when another process installed a good one meanwhile, the staging copy is
// discarded; a bad one (stale, damaged) is renamed aside and removed. A reader therefore sees no
// `dir`, or a complete one. Returns whether this process's copy was installed.
bool install_cache_dir(const std::string& dir, const std::function<void(const std::string& staging)>& build,
                       const std::function<bool(const std::string& dir)>& valid);

}  // namespace blu::train

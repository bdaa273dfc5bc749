// The blutrain version string, for the program's --version and logs.
#include "blutrain/version.h"

namespace blu::train {
const char* version() { return BLUTRAIN_VERSION_STRING; }
}  // namespace blu::train

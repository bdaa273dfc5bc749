// blutensor/src/capture/capture_fresh.h: tells an open capture which storages were allocated
// after it started (Note [Fresh buffers] in capture_record.cpp). Called by Storage's allocating
// constructor only; one thread-local load when no Scope is open.
#pragma once

namespace blu {
class Storage;
}

namespace blu::capture::detail {

void note_storage_allocated(const Storage* s);

}  // namespace blu::capture::detail

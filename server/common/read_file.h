// Reading a whole small file (a config file, a certificate, a token): shared by walserver,
// walclient and walctl, so that each says the same when it cannot.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace wal {

// The bytes of the file at `path`; INVALID_ARGUMENT "cannot read <what> <path>" when it cannot be
// opened. (A path that opens but cannot be read, a directory, reads as empty.)
inline absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " ", path));
  return text.str();
}

}  // namespace wal

// store/remote/s3_credentials.hpp: the AWS credentials and region of an S3
// remote, found where the AWS tools look, in their order:
//
//   1. anonymous=true on the URL: none (unsigned requests, a public bucket)
//   2. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), unless
//      the URL names a ?profile= (more specific than the environment)
//   3. the profile (?profile=NAME, else AWS_PROFILE, else "default") in the
//      shared credentials file (AWS_SHARED_CREDENTIALS_FILE, else
//      ~/.aws/credentials: [NAME]), then in the config file (AWS_CONFIG_FILE,
//      else ~/.aws/config: [profile NAME], or [default]):
//      aws_access_key_id, aws_secret_access_key, aws_session_token
//   4. none: unsigned requests (anonymous), unless a profile was named
//      (?profile= or AWS_PROFILE) and is not found: permission_denied
//
// The region: ?region=, else AWS_REGION, else AWS_DEFAULT_REGION, else the
// profile's `region` in the config file, else us-east-1.
//
// INI files: "[section]" lines, "key = value" lines, '#' and ';' comments.
// A secret is never printed: describe() names where the credentials came
// from and the access key id only.
//
// Thread-safety: a value; resolve_s3_credentials reads the environment and files.
#pragma once

#include <string>

#include "kcache/error.hpp"
#include "store/remote/remote_spec.hpp"

namespace kcache::remote {

struct S3Credentials {
  std::string access_key;     // empty: anonymous
  std::string secret_key;     // never printed
  std::string session_token;  // never printed
  std::string region;
  std::string source;  // "environment", "profile NAME in FILE", "anonymous"

  bool anonymous() const noexcept { return access_key.empty(); }
  // "access key AKIA... from the environment" or "anonymous (unsigned requests)".
  std::string describe() const;
};

// Finds the credentials and region of `spec` (an s3:// remote) as above.
// Failure: permission_denied naming the profile and the files looked in, for
// a named profile that is found nowhere or holds half a key pair.
Result<S3Credentials> resolve_s3_credentials(const RemoteSpec& spec);

}  // namespace kcache::remote

# Sourced by the scripts that install a Debian package a test needs (chromium-install.sh,
# pgbouncer-install.sh): apt_install PACKAGE WHO installs PACKAGE with apt-get, running
# `apt-get update` first only when the install fails (stale or missing package lists),
# and returns 0 when the package is installed. Without apt-get or without root it says
# what to do, on stderr as WHO, and returns 1. The dpkg lock is waited for: two test
# files may install their package at the same time.
apt_install() {
  local package=$1 who=$2 work status=0
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$who: apt-get is not here; install Debian's $package package (or its equivalent), then run the tests again" >&2
    return 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "$who: installing Debian's $package package needs root: run 'sudo apt-get install --no-install-recommends $package', then run the tests again" >&2
    return 1
  fi
  work=$(mktemp -d "${TMPDIR:-/tmp}/apt-install.XXXXXX")
  local install=(apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 "$package")
  echo "$who: installing Debian's $package package (apt-get install --no-install-recommends $package)..." >&2
  if ! DEBIAN_FRONTEND=noninteractive "${install[@]}" >"$work/apt.log" 2>&1; then
    echo "$who: apt-get install failed ($(tail -n 1 "$work/apt.log")); running apt-get update" >&2
    if ! apt-get update -qq -o DPkg::Lock::Timeout=300 >"$work/update.log" 2>&1; then
      echo "$who: apt-get update failed: $(tail -n 3 "$work/update.log")" >&2
      status=1
    elif ! DEBIAN_FRONTEND=noninteractive "${install[@]}" >"$work/apt.log" 2>&1; then
      echo "$who: apt-get install $package failed after apt-get update: $(tail -n 3 "$work/apt.log")" >&2
      status=1
    fi
  fi
  rm -rf "$work"
  return $status
}

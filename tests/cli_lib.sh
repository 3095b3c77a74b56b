# Helpers of the command-line checks (tests/cli_check.sh, tests/train_check.sh): exit codes, one-line
# errors, small data files, and killing a writer part-way. Sourced, never run.

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_exit CODE COMMAND...: runs COMMAND, checks its exit code, keeps stdout/stderr in $out/$err.
expect_exit() {
  local want=$1; shift
  set +e
  out=$("$@" 2>/tmp/frugal-cli-err.$$); local got=$?
  set -e
  err=$(cat /tmp/frugal-cli-err.$$); rm -f /tmp/frugal-cli-err.$$
  [ "$got" -eq "$want" ] || fail "'$*' exited $got, expected $want (stderr: $err)"
}

# make_data KIND DIR: small data files whose contents are predictable by eye (python3, standard library).
#   idx:    DIR/images (5 images of 4x6, image i has 255 on pixel (row r, column r+i)), DIR/labels (0 1 2 1 0), and .gz copies
#   cifar:  DIR/c10.bin (CIFAR-10 labels 3 1 3 9), DIR/c100.bin (CIFAR-100, coarse 4 7, fine 40 71)
#   folder: DIR/f/{cat/a.png (grey), cat/b.BMP (RGB), dog/c.Png (RGBA)}, 2x2 each
#   big:    DIR/big/a/0.png (1024x1024 noise) and 999 links to it
make_data() {
  python3 - "$@" <<'PY'
import gzip, os, struct, sys, zlib
kind, d = sys.argv[1], sys.argv[2]
def png(path, w, h, channels, pixels):
    color = {1: 0, 3: 2, 4: 6}[channels]
    raw = b"".join(b"\0" + pixels[y * w * channels:(y + 1) * w * channels] for y in range(h))
    chunk = lambda t, data: struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
def bmp(path, w, h, rgb):  # rgb: rows top to bottom; BMP stores them bottom-up, BGR, padded to 4 bytes
    stride = (3 * w + 3) & ~3
    rows = [b"".join(bytes(rgb[(y * w + x) * 3:(y * w + x) * 3 + 3][::-1]) for x in range(w)).ljust(stride, b"\0")
            for y in reversed(range(h))]
    body = b"".join(rows)
    with open(path, "wb") as f:
        f.write(b"BM" + struct.pack("<IHHI", 54 + len(body), 0, 0, 54)
                + struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(body), 2835, 2835, 0, 0) + body)
if kind == "idx":
    images = bytes(255 if c == r + i else 0 for i in range(5) for r in range(4) for c in range(6))
    files = {"images": struct.pack(">IIII", 0x803, 5, 4, 6) + images, "labels": struct.pack(">II", 0x801, 5) + bytes([0, 1, 2, 1, 0])}
    for name, data in files.items():
        open(f"{d}/{name}", "wb").write(data)
        open(f"{d}/{name}.gz", "wb").write(gzip.compress(data))
elif kind == "cifar":
    open(f"{d}/c10.bin", "wb").write(b"".join(bytes([label]) + bytes([label * 20]) * 3072 for label in (3, 1, 3, 9)))
    open(f"{d}/c100.bin", "wb").write(b"".join(bytes([coarse, fine]) + bytes(3072) for coarse, fine in ((4, 40), (7, 71))))
elif kind == "folder":
    for sub in ("cat", "dog"):
        os.makedirs(f"{d}/f/{sub}", exist_ok=True)
    png(f"{d}/f/cat/a.png", 2, 2, 1, bytes([0, 100, 200, 40]))
    bmp(f"{d}/f/cat/b.BMP", 2, 2, bytes(range(10, 22)))
    png(f"{d}/f/dog/c.Png", 2, 2, 4, bytes(range(16)))
elif kind == "big":
    os.makedirs(f"{d}/big/a")
    png(f"{d}/big/a/0.png", 1024, 1024, 3, os.urandom(1024 * 1024 * 3))
    for i in range(1, 1000):
        os.symlink(f"{d}/big/a/0.png", f"{d}/big/a/{i}.png")
PY
}

# expect_one_line_error PATTERN: the last command's stderr is one line matching PATTERN (grep -E).
# Checks `frugal bench NAME --json` output in $out: the schema of every result, then the Python
# assertions read from stdin, which see `report` and `cases` ({case: {impl: result}}).
check_bench_report() {
  local name=$1 checks
  checks=$(cat)
  python3 - "$out" "$name" <<PY || fail "bench $name --json is not as expected: $out"
import json, os, sys
report = json.loads(sys.argv[1])
assert report["bench"] == sys.argv[2] and report["device"] == "cpu", report
cases = {}
for r in report["results"]:
    assert set(r) == {"case", "impl", "value", "unit", "higher_is_better"}, r
    assert r["value"] > 0, r
    cases.setdefault(r["case"], {})[r["impl"]] = r
$checks
PY
}

expect_one_line_error() {
  [ "$(wc -l <<<"$err")" -eq 1 ] || fail "expected a one-line error, got: $err"
  grep -Eq -- "$1" <<<"$err" || fail "error does not match '$1': $err"
}

# wait_for_writer PID FOLDER: waits until process PID writes a temporary file in FOLDER, and prints
# how: "unnamed" (an O_TMPFILE file, /proc shows "FOLDER/#INODE (deleted)") or "named" (FOLDER/*.tmp-*).
# Fails if PID ends first.
wait_for_writer() {
  local pid=$1 folder=$2 fd target
  for _ in $(seq 3000); do
    for fd in /proc/"$pid"/fd/*; do
      target=$(readlink "$fd" 2>/dev/null) || continue
      case $target in
        "$folder"/\#*" (deleted)") echo unnamed; return 0 ;;
        "$folder"/*.tmp-*) echo named; return 0 ;;
      esac
    done
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}

# kill_while_writing FOLDER COMMAND...: runs COMMAND and sends it SIGKILL as soon as it writes a
# temporary file in FOLDER (polled without pause, so even a short write is caught); prints
# "unnamed" or "named" as wait_for_writer does. Fails if COMMAND ends first.
kill_while_writing() {
  python3 - "$@" <<'PY2'
import os, signal, subprocess, sys
folder, command = sys.argv[1], sys.argv[2:]
process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
fds = f"/proc/{process.pid}/fd"
while process.poll() is None:
    try:
        names = os.listdir(fds)
    except OSError:
        continue
    for name in names:
        try:
            target = os.readlink(f"{fds}/{name}")
        except OSError:  # closed meanwhile
            continue
        how = ("unnamed" if target.startswith(folder + "/#") and target.endswith(" (deleted)")
               else "named" if target.startswith(folder + "/") and ".tmp-" in target else None)
        if how:
            process.send_signal(signal.SIGKILL)
            process.wait()
            print(how)
            sys.exit(0)
sys.exit(1)
PY2
}

# make_big_idx DIR: DIR/images.gz (100000 images of 28x28, 78 MB inflated) and DIR/labels.gz, big
# enough that packing them takes a while; the bytes repeat, so they compress to almost nothing.
make_big_idx() {
  python3 - "$1" <<'PY2'
import gzip, struct, sys
d, n = sys.argv[1], 100000
with gzip.open(f"{d}/images.gz", "wb", compresslevel=1) as f:
    f.write(struct.pack(">IIII", 0x803, n, 28, 28))
    image = bytes(range(256)) * 3 + bytes(16)
    for _ in range(n // 1000):
        f.write(image * 1000)
with gzip.open(f"{d}/labels.gz", "wb", compresslevel=1) as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
PY2
}

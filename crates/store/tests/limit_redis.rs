//! The Redis rate-limit store against a real standalone `redis-server` (one per test): the
//! suite of `limit_redis_suite/`.

#![allow(clippy::unwrap_used)]

mod limit_redis_suite;
mod limit_support;

use std::time::Duration;

use anteroom_store::limit::RedisLimitConfig;
use anteroom_test_support::ports::free_port;
use anteroom_test_support::redis::RedisServer;
use limit_redis_suite::Target;
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

    /// A plain synchronous connection, for looking at what the store wrote.
    fn connection(&self) -> redis::Connection {
        redis::Client::open(self.server.url())
            .unwrap()
            .get_connection()
            .unwrap()
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
        command.query(&mut self.connection()).unwrap()
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

limit_redis_suite!(Standalone::start());

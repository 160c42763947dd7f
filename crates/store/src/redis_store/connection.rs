//! Connections to a standalone Redis or a Redis Cluster, behind one small type.
//!
//! Standalone servers are reached through a [`ConnectionManager`] (one multiplexed connection
//! that reconnects with backoff after a failure); clusters through a [`ClusterConnection`]
//! (one multiplexed connection per node, following slot moves and reconnecting). Both pipeline
//! concurrent requests on their connections, and both are cheap handles: every operation
//! clones one. Each request is bounded by the configured timeout on the client side too.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, RedisResult, ScriptInvocation};

/// How long a store call may take by default, connecting included (`[store] timeout`).
pub(crate) const DEFAULT_TIMEOUT: Duration = anteroom_core::config::DEFAULT_REDIS_TIMEOUT;

/// The key prefix by default: keys are `anteroom:{<room>}:…`.
pub(crate) const DEFAULT_KEY_PREFIX: &str = "anteroom";

/// How to reach Redis; building one does no I/O.
pub(crate) enum Client {
    Standalone(redis::Client),
    Cluster(Box<ClusterClient>),
}

/// An open connection (a cheap, cloneable handle).
#[derive(Clone)]
pub(crate) enum Connection {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Client {
    /// Validates the URLs; connects later, in [`Client::connect`].
    pub(crate) fn new(urls: &[String], cluster: bool, timeout: Duration) -> RedisResult<Client> {
        if cluster {
            let client = ClusterClientBuilder::new(urls.to_vec())
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .build()?;
            return Ok(Client::Cluster(Box::new(client)));
        }
        let [url] = urls else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a standalone redis store takes exactly one URL",
            )));
        };
        Ok(Client::Standalone(redis::Client::open(url.as_str())?))
    }

    /// Connects; later failures are repaired by the connection itself.
    pub(crate) async fn connect(&self, timeout: Duration) -> RedisResult<Connection> {
        match self {
            Client::Standalone(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_max_delay(Duration::from_secs(2));
                let manager = ConnectionManager::new_with_config(client.clone(), config).await?;
                Ok(Connection::Standalone(manager))
            }
            Client::Cluster(client) => {
                Ok(Connection::Cluster(client.get_async_connection().await?))
            }
        }
    }
}

impl Connection {
    /// Runs a script (EVALSHA, loading it on NOSCRIPT), routed by its first key.
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> RedisResult<T> {
        match self {
            Connection::Standalone(manager) => invocation.invoke_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => invocation.invoke_async(&mut cluster.clone()).await,
        }
    }

    /// Runs an `FCALL` of the room library, routed by its first key; when Redis answers that
    /// the function is missing (a restarted Redis without persistence, `FUNCTION FLUSH`, a
    /// Cluster primary that joined later), loads the library again and calls once more.
    pub(crate) async fn fcall<T: FromRedisValue>(&self, fcall: &Cmd) -> RedisResult<T> {
        match self.query(fcall).await {
            Err(error) if is_missing_function(&error) => {
                self.load_room_library().await?;
                self.query(fcall).await
            }
            answer => answer,
        }
    }

    /// Loads the room library (`scripts.rs`), replacing a library of the same name (the same
    /// code: the name carries its hash); on a Cluster, on every primary.
    pub(crate) async fn load_room_library(&self) -> RedisResult<()> {
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD")
            .arg("REPLACE")
            .arg(&super::scripts::LIBRARY.code);
        self.query::<redis::Value>(&load).await.map(|_| ())
    }

    /// Runs one command, routed by its key.
    pub(crate) async fn query<T: FromRedisValue>(&self, command: &Cmd) -> RedisResult<T> {
        match self {
            Connection::Standalone(manager) => command.query_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => command.query_async(&mut cluster.clone()).await,
        }
    }
}

/// Whether Redis refused an `FCALL` because the function is not loaded.
fn is_missing_function(error: &redis::RedisError) -> bool {
    error
        .detail()
        .is_some_and(|detail| detail.starts_with("Function not found"))
}

/// A Redis of a [`RedisConfig`](crate::RedisConfig) connected on first use, with its key
/// prefix and the time limit every call is held to: what the event outbox and the shared key
/// set each keep beside the store.
pub(crate) struct LazyRedis {
    client: Client,
    connection: tokio::sync::OnceCell<Connection>,
    timeout: Duration,
    prefix: String,
    /// What the calls are for, in errors: "the event outbox", "the shared key set".
    subject: &'static str,
}

impl LazyRedis {
    /// Checks `config`'s URLs; connects later, on the first call.
    pub(crate) fn new(
        config: &crate::RedisConfig,
        subject: &'static str,
    ) -> Result<LazyRedis, crate::StoreError> {
        let client =
            Client::new(&config.urls, config.cluster, config.timeout).map_err(|error| {
                crate::StoreError::backend(format!("invalid redis configuration: {error}"), error)
            })?;
        Ok(LazyRedis {
            client,
            connection: tokio::sync::OnceCell::new(),
            timeout: if config.timeout.is_zero() {
                DEFAULT_TIMEOUT
            } else {
                config.timeout
            },
            prefix: if config.key_prefix.is_empty() {
                DEFAULT_KEY_PREFIX.to_owned()
            } else {
                config.key_prefix.clone()
            },
            subject,
        })
    }

    /// The key prefix (`anteroom` unless configured).
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The connection, made by the first call that needs it.
    pub(crate) async fn connection(&self) -> Result<Connection, crate::StoreError> {
        self.connection
            .get_or_try_init(|| async {
                self.client
                    .connect(self.timeout)
                    .await
                    .map_err(|error| crate::StoreError::backend("cannot connect to redis", error))
            })
            .await
            .cloned()
    }

    /// Runs `operation` (the `what` of the subject) within the time limit.
    pub(crate) async fn bounded<T>(
        &self,
        what: &str,
        operation: impl std::future::Future<Output = Result<T, crate::StoreError>>,
    ) -> Result<T, crate::StoreError> {
        bounded(
            self.timeout,
            format!("{}'s {what}", self.subject),
            operation,
        )
        .await
    }
}

/// Runs `operation` within `timeout`: the one bound every Redis call of the store, the outbox,
/// the shared key set and the join batches is held to (SPEC §9.4). Past it the error says
/// `what` did not complete; the call may still have happened.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    what: impl std::fmt::Display,
    operation: impl std::future::Future<Output = Result<T, crate::StoreError>>,
) -> Result<T, crate::StoreError> {
    match tokio::time::timeout(timeout, operation).await {
        Ok(result) => result,
        Err(elapsed) => Err(crate::StoreError::backend(
            format!("redis did not complete {what} within {timeout:?}"),
            elapsed,
        )),
    }
}

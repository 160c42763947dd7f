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

    /// Runs one command, routed by its key.
    pub(crate) async fn query<T: FromRedisValue>(&self, command: &Cmd) -> RedisResult<T> {
        match self {
            Connection::Standalone(manager) => command.query_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => command.query_async(&mut cluster.clone()).await,
        }
    }
}

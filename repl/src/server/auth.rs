//! Connection start: parameters reported to the client, and authentication (none, or
//! SCRAM-SHA-256 against the password given to `weir serve`).

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramAuth};
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata, AuthSource,
    DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::{ClientInfo, PidSecretKeyGenerator, RandomPidSecretKeyGenerator};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

const SCRAM_ITERATIONS: usize = 4096;

/// The parameters every client is told at start (server_version decides which catalog
/// queries psql sends).
pub fn server_parameters() -> DefaultServerParameterProvider {
    let mut p = DefaultServerParameterProvider::default();
    p.server_version = weir_planner::session::SERVER_VERSION.to_string();
    p.time_zone = "UTC".into();
    p.date_style = "ISO, MDY".into();
    p.scram_iterations = SCRAM_ITERATIONS;
    p
}

/// Either no authentication or SCRAM-SHA-256.
pub enum Startup {
    Trust {
        params: Box<DefaultServerParameterProvider>,
        keys: RandomPidSecretKeyGenerator,
    },
    Scram(Box<SASLAuthStartupHandler<DefaultServerParameterProvider>>),
}

impl Startup {
    pub fn new(password: Option<String>) -> Self {
        match password {
            None => Startup::Trust {
                params: Box::new(server_parameters()),
                keys: RandomPidSecretKeyGenerator::default(),
            },
            Some(password) => {
                let mut scram = ScramAuth::new(Arc::new(SinglePassword::new(&password)));
                scram.set_iterations(SCRAM_ITERATIONS);
                Startup::Scram(Box::new(
                    SASLAuthStartupHandler::new(Arc::new(server_parameters())).with_scram(scram),
                ))
            }
        }
    }
}

/// The one password `weir serve --password` was given, for any user name; only its salted
/// form is kept.
#[derive(Debug)]
struct SinglePassword {
    salt: Vec<u8>,
    salted: Vec<u8>,
}

impl SinglePassword {
    fn new(password: &str) -> Self {
        let salt = rand::random::<[u8; 16]>().to_vec();
        let salted = gen_salted_password(password, &salt, SCRAM_ITERATIONS);
        Self { salt, salted }
    }
}

#[async_trait]
impl AuthSource for SinglePassword {
    async fn get_password(&self, _login: &LoginInfo) -> PgWireResult<Password> {
        Ok(Password::new(Some(self.salt.clone()), self.salted.clone()))
    }
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match self {
            Startup::Scram(handler) => handler.on_startup(client, message).await,
            Startup::Trust { params, keys } => {
                if let PgWireFrontendMessage::Startup(ref startup) = message {
                    protocol_negotiation(client, startup).await?;
                    save_startup_parameters_to_metadata(client, startup);
                    let (pid, secret) = keys.generate(client);
                    client.set_pid_and_secret_key(pid, secret);
                    finish_authentication(client, params.as_ref()).await?;
                }
                Ok(())
            }
        }
    }
}

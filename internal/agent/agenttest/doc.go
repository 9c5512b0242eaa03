// Package agenttest holds the fakes and fixtures the agent's packages
// share in their unit tests (never in production code): a member set, a
// responder table, Services. End-to-end tests use the real parts
// (internal/testenv, internal/netlab) instead.
//
// It may import the agent's leaf packages (convert, mailbox), announce,
// responder and the API types; nothing imports it but tests.
package agenttest

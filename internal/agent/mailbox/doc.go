// Package mailbox passes the agent's latest decision from the decision loop
// to its slower consumers (status writer, safety checks, snapshot): each
// consumer sees the newest value, never a queue of stale ones, and the
// producer never blocks.
//
// It imports nothing but the standard library.
package mailbox

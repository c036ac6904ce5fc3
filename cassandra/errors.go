package cassandra

import "errors"

// Errors of this package, for errors.Is. They are wrapped with the detail
// (and also wrap registry.ErrInvalidOption: each is a configuration this
// package refuses; ErrSchemaAgreement wraps registry.ErrRegistry instead).
var (
	// ErrFragileReplication is returned by NewRegistry and CreateSchema
	// when they would create the registry keyspace with a replication that
	// cannot survive the loss of one node of the cluster (one replica on a
	// cluster of several nodes, two replicas in all, a data centre the
	// cluster does not have, or a quorum the cluster's nodes cannot reach
	// at all), unless Config.AllowFragileReplication is set. Nothing is
	// created. On a one-node cluster (tests, development) one replica is
	// allowed.
	ErrFragileReplication = errors.New("replication cannot survive the loss of one node")

	// ErrLocalSerial is returned for Config.SerialConsistency
	// LOCAL_SERIAL: a name is global, and LOCAL_SERIAL lets two data
	// centres cut off from each other both win one name.
	ErrLocalSerial = errors.New("LOCAL_SERIAL cannot protect node names")

	// ErrNoKeyspace is returned by NewRegistry and SetUpSchema with
	// Config.NoCreateKeyspace when the registry keyspace does not exist
	// (a misspelt name, or a cluster not set up yet). The message names
	// the keyspaces that hold a registry. Nothing is created.
	ErrNoKeyspace = errors.New("registry keyspace missing")

	// ErrUnknownDataCentre is returned by NewRegistry and SetUpSchema
	// when the replication of a keyspace to create names a data centre
	// the cluster does not have; the message names the cluster's data
	// centres. Nothing is created.
	ErrUnknownDataCentre = errors.New("data centre unknown to the cluster")

	// ErrSchemaAgreement is returned (with registry.ErrRegistry) when the
	// cluster's nodes did not agree on the schema in time: before
	// SetUpSchema creates anything, or after it or a Registry created the
	// keyspace or a table. What was created stays (SetUpSchema's report
	// says what); SetUpSchema can be run again: it waits for the nodes to
	// agree, then creates only what is missing.
	ErrSchemaAgreement = errors.New("the cluster's nodes did not agree on the schema")
)

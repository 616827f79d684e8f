// Package announce tells every front end and worker, over plain NATS (not the stream), what
// another one just recorded, so that each serves it from memory:
//
//   - final results (FinalsSubject), which front ends keep for lookups;
//   - messages the platform accepted (SentSubject), which the front end that receives their
//     delivery receipt finds by msgid without a store read;
//   - binding changes (BindingsSubject), after which workers forget what they cached of a user.
//
// Every announcement is best effort: the store has what it announces already, and a process
// that missed one reads the store instead.
package announce

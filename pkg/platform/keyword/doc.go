// Package keyword holds the messaging platform's rules for the values of
// template keywords: the kinds of keyword (thing, number, time, …) and what a
// value of each may hold, and the one table of the characters the platform
// refuses in any value, each class with what the service does about it
// before sending (refuse the push, send a plain space, or drop the
// character).
//
// Both sides read these tables: the platform simulator refuses by them, and
// the push validation (package push) refuses or cleans by them, so that a
// value the front end accepts is never answered 47003 by the platform.
package keyword

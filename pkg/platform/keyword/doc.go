// Package keyword holds the messaging platform's rules for the values of
// template keywords: the kinds of keyword (Kinds: thing, number, letter,
// symbol, character_string, time, date, amount, phone_number, car_number,
// name, phrase, short_thing, const, enum, and keyword, first and remark for
// the old industry templates), each with its length and character rule, and the one table of
// the characters the platform refuses in any value, each class with what the
// service does about it before sending (refuse the push, send a plain space,
// or drop the character).
//
// A keyword's kind comes from its name: the name without its trailing digits
// (character_string2 is a character_string). A name of no kind the table
// holds (Of returns nil) is refused by the configuration.
//
// Both sides read these tables: the platform simulator refuses by them, and
// the push validation (package push, with the account's mapping of data
// fields to keywords) refuses or cleans by them, so that a value the front
// end accepts is never answered 47003 by the platform. Two kinds cannot be
// checked fully here and say so (Kind.Checked false): const and enum values
// must be among those approved for the template, which only the platform
// knows. The old industry templates' keywords (keyword1, …) are not refused
// by the platform at all since 2023-05-04: it cuts them to 20 characters and
// removes line breaks (Strip); the front end (package push) refuses a value
// the platform would cut, so nothing is cut unseen.
package keyword

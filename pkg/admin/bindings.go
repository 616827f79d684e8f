package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/schollz/progressbar/v3"

	"github.com/campus-it/ucs/pkg/announce"
	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

func bindingsCommand() *command {
	return &command{
		name:    "bindings",
		summary: "Import, export, show and delete bindings of campus user numbers to the official account's followers (openid).",
		sub:     []*command{bindingsImport(), bindingsExport(), bindingsShow(), bindingsDelete()},
	}
}

// Rejection is a row of an import file that was not imported, and why.
type Rejection struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

// ImportFile is a parsed import file: its valid rows, in file order, and its rejected ones.
type ImportFile struct {
	Rows     []store.Binding
	Lines    []int // Lines[i] is the line of Rows[i]
	Rejected []Rejection
}

// ParseImport reads bindings from r, as CSV (userid,openid; a first line "userid,openid" is a
// header) or JSON lines ({"userid":…,"openid":…}); format is "csv", "jsonl", or "" to tell by
// the first character. Blank lines are skipped; every other row is either a binding or a
// rejection with its line number. A user number or an openid given twice is taken the first
// time and rejected after that: which binding was meant is not for the import to guess.
func ParseImport(r io.Reader, format string) (*ImportFile, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	// Spreadsheet programs begin their CSV with a byte order mark.
	if b, err := br.Peek(3); err == nil && bytes.Equal(b, []byte("\xef\xbb\xbf")) {
		_, _ = br.Discard(3)
	}
	if format == "" {
		format = "csv"
		// Peek returns what it could read, and an error only with less than asked for.
		head, _ := br.Peek(4096)
		if t := bytes.TrimLeft(head, " \t\r\n"); len(t) > 0 && t[0] == '{' {
			format = "jsonl"
		}
	}
	f := &ImportFile{}
	first, firstOpenID := map[string]int{}, map[string]int{}
	add := func(line int, userID, openID string) {
		if reason := checkBinding(userID, openID); reason != "" {
			f.Rejected = append(f.Rejected, Rejection{line, reason})
			return
		}
		if l, dup := first[userID]; dup {
			f.Rejected = append(f.Rejected, Rejection{line, fmt.Sprintf("userid %s: given before, on line %d", userID, l)})
			return
		}
		if l, dup := firstOpenID[openID]; dup {
			f.Rejected = append(f.Rejected, Rejection{line, fmt.Sprintf("openid %s: given before, on line %d (a follower is bound to one user number)", openID, l)})
			return
		}
		first[userID], firstOpenID[openID] = line, line
		f.Rows = append(f.Rows, store.Binding{UserID: userID, OpenID: openID})
		f.Lines = append(f.Lines, line)
	}
	switch format {
	case "csv":
		// Line by line rather than with encoding/csv: neither a user number nor an openid may
		// hold a comma, a quote or a line break, and a stray quote would make encoding/csv read
		// on across lines, swallowing good rows into one rejection with the wrong line number.
		sc := bufio.NewScanner(br)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		header, swapped := true, false
		for line := 1; sc.Scan(); line++ {
			text := strings.TrimSpace(sc.Text())
			if text == "" {
				continue
			}
			rec := strings.Split(text, ",")
			for i, field := range rec {
				field = strings.TrimSpace(field)
				// Spreadsheets may quote every field.
				if len(field) >= 2 && field[0] == '"' && field[len(field)-1] == '"' {
					field = field[1 : len(field)-1]
				}
				// A leading ' is export's mark that a spreadsheet must not take the value for
				// a formula (no user number or openid holds one).
				rec[i] = strings.TrimPrefix(field, "'")
			}
			// A first line that names a column is a header: it must name both, in either order,
			// and the rows are read by it. Taken for data, it would bind a user "openid", or
			// every row backwards. A later one (files joined, whose columns may be the other way
			// round) is refused: nothing is written.
			names, named := make([]string, len(rec)), false
			for i, field := range rec {
				names[i] = columnName(field)
				named = named || names[i] != ""
			}
			switch {
			case named && !header:
				return nil, fmt.Errorf("line %d: %q names a column, but only the first line may be a header (files joined?)", line, text)
			case named:
				header = false
				if len(rec) != 2 || names[0] == "" || names[1] == "" || names[0] == names[1] {
					return nil, fmt.Errorf("line %d: a header names the two columns userid and openid, in either order, not %q", line, text)
				}
				swapped = names[0] == "openid"
				continue
			}
			header = false
			if len(rec) != 2 {
				f.Rejected = append(f.Rejected, Rejection{line, fmt.Sprintf("%d fields, want 2: userid,openid", len(rec))})
				continue
			}
			if swapped {
				rec[0], rec[1] = rec[1], rec[0]
			}
			add(line, rec[0], rec[1])
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	case "jsonl":
		sc := bufio.NewScanner(br)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for line := 1; sc.Scan(); line++ {
			b := bytes.TrimSpace(sc.Bytes())
			if len(b) == 0 {
				continue
			}
			var row struct {
				UserID *string `json:"userid"`
				OpenID *string `json:"openid"`
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&row); err != nil {
				f.Rejected = append(f.Rejected, Rejection{line, "not a JSON object of userid and openid: " + err.Error()})
				continue
			}
			if dec.More() {
				f.Rejected = append(f.Rejected, Rejection{line, "more than one JSON value on the line"})
				continue
			}
			if row.UserID == nil || row.OpenID == nil {
				f.Rejected = append(f.Rejected, Rejection{line, "userid and openid are both required"})
				continue
			}
			add(line, *row.UserID, *row.OpenID)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("line after %d: %w", len(f.Rows)+len(f.Rejected), err)
		}
	default:
		return nil, fmt.Errorf("format %q: csv or jsonl", format)
	}
	return f, nil
}

// checkBinding says what is wrong with a binding, or "". A user number is 1 to 64 letters,
// digits, '.', '_' or '-'; an openid (the platform's per-account follower id, 28 characters in
// practice) 1 to 128 letters, digits, '_' or '-'.
func checkBinding(userID, openID string) string {
	switch {
	case userID == "":
		return "userid: empty"
	case len(userID) > 64:
		return fmt.Sprintf("userid: %d characters, at most 64", len(userID))
	case !push.ValidUserID(userID):
		return fmt.Sprintf("userid %q: only letters, digits, '.', '_' and '-'", userID)
	case openID == "":
		return "openid: empty"
	case len(openID) > 128:
		return fmt.Sprintf("openid: %d characters, at most 128", len(openID))
	case !plain(openID, "_-"):
		return fmt.Sprintf("openid %q: only letters, digits, '_' and '-'", openID)
	}
	return ""
}

func plain(s, extra string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(extra, r)) {
			return false
		}
	}
	return true
}

// importSummary is the answer of bindings import.
type importSummary struct {
	File string `json:"file"`
	// Rows is the number of rows read: bindings and rejections.
	Rows int `json:"rows"`
	store.ImportResult
	Rejected []Rejection `json:"rejected"`
	Seconds  float64     `json:"seconds"`
}

func bindingsImport() *command {
	var format string
	return &command{
		name: "import", args: "FILE", nargs: 1,
		summary: "Bind many campus user numbers at once, from CSV (userid,openid) or JSON lines.",
		help: `
FILE is CSV with the columns userid,openid (a first line naming them, in either order, is a
header: "openid,userid" or "user_id,open_id" too; one naming anything else is refused) or JSON lines
{"userid":"…","openid":"…"}; - reads standard input. Valid rows are written in bulk: a user number
not bound yet is inserted, one bound to another openid updated, one bound as given left unchanged.
Importing the same file again changes nothing. A follower is bound to one user number: a row
whose openid another user number keeps (bound on the binding page, or before) is rejected. Each
rejected row is listed with its line and why; the other rows are imported all the same, and the
exit code is then 1.`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&format, "format", "", "csv or jsonl (default: by the file's extension, else its first character)")
		},
		run: func(ctx context.Context, a *app, args []string) error {
			name := args[0]
			if format == "" {
				switch strings.ToLower(filepath.Ext(name)) {
				case ".csv":
					format = "csv"
				case ".jsonl", ".ndjson":
					format = "jsonl"
				}
			}
			if format != "" && format != "csv" && format != "jsonl" {
				return usagef("-format %q: csv or jsonl", format)
			}
			var in io.Reader = os.Stdin
			if name != "-" {
				fh, err := os.Open(name)
				if err != nil {
					return err
				}
				defer func() { _ = fh.Close() }() // only read: its read errors are the ones that count
				in = fh
			}
			st, err := a.open(ctx)
			if err != nil {
				return err
			}
			t0 := time.Now()
			f, err := ParseImport(in, format)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			progress, finish := a.progress(len(f.Rows))
			res, err := st.ImportBindings(ctx, f.Rows, progress)
			finish()
			if err != nil {
				return err
			}
			if res.Inserted+res.Updated+len(res.Conflicts) > 0 {
				changed := make([]string, 0, len(f.Rows))
				for _, b := range f.Rows {
					changed = append(changed, b.UserID)
				}
				a.tellWorkers(changed...)
			}
			for _, c := range res.Conflicts {
				f.Rejected = append(f.Rejected, Rejection{f.Lines[c.Row], fmt.Sprintf(
					"openid %s: bound to user number %s; unbind it first (bindings delete %s)", f.Rows[c.Row].OpenID, c.UserID, c.UserID)})
			}
			slices.SortStableFunc(f.Rejected, func(a, b Rejection) int { return a.Line - b.Line })
			sum := importSummary{File: name, Rows: len(f.Rows) + len(f.Rejected) - len(res.Conflicts), ImportResult: res,
				Rejected: f.Rejected, Seconds: time.Since(t0).Seconds()}
			if sum.Rejected == nil {
				sum.Rejected = []Rejection{}
			}
			a.out(sum, func(w io.Writer) {
				fmt.Fprintf(w, "Imported %s: %d rows in %.1fs\n", name, sum.Rows, sum.Seconds)
				fmt.Fprintf(w, "  inserted   %8d\n  updated    %8d\n  unchanged  %8d\n  rejected   %8d\n",
					res.Inserted, res.Updated, res.Unchanged, len(f.Rejected))
				if len(f.Rejected) > 0 {
					fmt.Fprintln(w, "\nRejected rows:")
					for _, r := range f.Rejected {
						fmt.Fprintf(w, "  line %d: %s\n", r.Line, r.Reason)
					}
				}
			})
			if len(f.Rejected) > 0 {
				return errReported
			}
			return nil
		},
	}
}

// progress returns a function that shows how far an import of total rows is, as a bar on a
// terminal (nothing elsewhere: a log is no place for one), and one that ends the bar.
func (a *app) progress(total int) (func(store.ImportProgress), func()) {
	if !a.env.Terminal || total == 0 {
		return nil, func() {}
	}
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(a.env.Stderr),
		progressbar.OptionSetDescription("reading the stored bindings"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("rows"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionFullWidth(),
		progressbar.OptionClearOnFinish(),
	)
	writing := false
	return func(p store.ImportProgress) {
			switch {
			case p.Done == 0 && !writing:
				// Every stored binding is read before the first write: say how many so far.
				bar.Describe(fmt.Sprintf("reading the stored bindings: %d", p.Compared))
				_ = bar.RenderBlank()
			default:
				if !writing {
					writing = true
					bar.Describe("importing")
				}
				_ = bar.Set(p.Done)
			}
		}, func() {
			_ = bar.Finish()
		}
}

func bindingsExport() *command {
	var format, output string
	return &command{
		name: "export", nargs: 0,
		summary: "Write every binding, as CSV (userid,openid, the import's format) or JSON lines.",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&format, "format", "csv", "csv or jsonl (--json also means jsonl)")
			fs.StringVar(&output, "o", "-", "file to write; - is standard output")
		},
		run: func(ctx context.Context, a *app, _ []string) error {
			if a.json {
				format = "jsonl"
			}
			if format != "csv" && format != "jsonl" {
				return usagef("-format %q: csv or jsonl", format)
			}
			st, err := a.open(ctx)
			if err != nil {
				return err
			}
			out := a.env.Stdout
			var fh *os.File
			if output != "-" {
				// Every user number with its openid: for the operator's eyes only (0600, as the
				// service's own files), however loose the shell's umask.
				if fh, err = os.OpenFile(output, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
					return err
				}
				// A file that was there keeps its mode: set it, but only on a regular file (not
				// on /dev/null or a terminal, which other users share).
				if fi, serr := fh.Stat(); serr != nil || fi.Mode().IsRegular() {
					if err = errors.Join(serr, fh.Chmod(0o600)); err != nil {
						_ = fh.Close()
						return err
					}
				}
				defer func() { _ = fh.Close() }() // the success path checks its own close below
				out = fh
			}
			bw := bufio.NewWriterSize(out, 64<<10)
			n := 0
			var cw *csv.Writer
			if format == "csv" {
				cw = csv.NewWriter(bw)
				_ = cw.Write([]string{"userid", "openid"})
			}
			enc := json.NewEncoder(bw)
			left := 0
			err = st.EachBinding(ctx, func(b store.Binding) error {
				if !push.ValidUserID(b.UserID) {
					// Stored by an earlier version from a sign-in that named anything: no push
					// can name it, and import would refuse it.
					left++
					return nil
				}
				n++
				if cw != nil {
					return cw.Write([]string{spreadsheetSafe(b.UserID), spreadsheetSafe(b.OpenID)})
				}
				return enc.Encode(map[string]string{"userid": b.UserID, "openid": b.OpenID})
			})
			if cw != nil {
				cw.Flush()
				err = errors.Join(err, cw.Error())
			}
			if err = errors.Join(err, bw.Flush()); err != nil {
				return err
			}
			if fh != nil {
				if err := fh.Close(); err != nil {
					return err
				}
				fmt.Fprintf(a.env.Stderr, "Exported %d bindings to %s.\n", n, output)
			}
			if left > 0 {
				fmt.Fprintf(a.env.Stderr, "Left out %d bindings of user numbers no push can name (only letters, digits, '.', '_' and '-', at most 64): delete them with bindings delete.\n", left)
			}
			return nil
		},
	}
}

// bindingView is a binding as show answers it.
type bindingView struct {
	UserID    string    `json:"userid"`
	OpenID    string    `json:"openid"`
	Following bool      `json:"following"`
	Updated   time.Time `json:"updated"`
}

func bindingsShow() *command {
	return &command{
		name: "show", args: "USERID", nargs: 1,
		summary: "Show the binding of a campus user number, and whether its openid follows the account.",
		run: func(ctx context.Context, a *app, args []string) error {
			st, err := a.open(ctx)
			if err != nil {
				return err
			}
			b, err := st.Binding(ctx, args[0])
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("user %s has no binding", args[0])
			}
			if err != nil {
				return err
			}
			v := bindingView{b.UserID, b.OpenID, b.Following, b.Updated}
			a.out(v, func(w io.Writer) {
				following := "yes"
				if !b.Following {
					following = "no (the platform reported an unsubscribe)"
				}
				fmt.Fprintf(w, "userid:     %s\nopenid:     %s\nfollowing:  %s\nupdated:    %s\n", b.UserID, b.OpenID, following,
					a.shown(b.Updated))
			})
			return nil
		},
	}
}

// spreadsheetSafe is a CSV value as a spreadsheet shows it, not runs it: one that begins as a
// formula does (=, +, -, @) gets a leading ', which import drops.
func spreadsheetSafe(v string) string {
	if v != "" && strings.ContainsRune("=+-@", rune(v[0])) {
		return "'" + v
	}
	return v
}

// columnName is a CSV header field as a column's name, "userid" or "openid", whatever its case
// and its '_', '-' or spaces; "" when it names neither.
func columnName(field string) string {
	n := strings.ToLower(strings.NewReplacer("_", "", "-", "", " ", "").Replace(field))
	if n == "userid" || n == "openid" {
		return n
	}
	return ""
}

// tellWorkers tells every worker that the bindings of userIDs changed, as the binding page does,
// so that none sends on what it cached of them (for 30 s). Best effort: the store has the
// change, and a worker not told reads it within those 30 s, which the warning on standard error
// says.
func (a *app) tellWorkers(userIDs ...string) {
	err := func() error {
		if a.cfg.NATS.URL == "" {
			return errors.New("no nats.url in the configuration, nor NATS_URL")
		}
		opts := []nats.Option{nats.Name("ucs admin"), nats.Timeout(5 * time.Second)}
		if a.natsUser != "" {
			opts = append(opts, nats.UserInfo(a.natsUser, a.natsPassword))
		}
		nc, err := nats.Connect(a.cfg.NATS.URL, opts...)
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			return errors.New("nats.url does not parse") // its errors quote the URL, and any password in it
		} else if err != nil {
			return err
		}
		defer nc.Close()
		for _, u := range userIDs {
			if err := nc.Publish(announce.BindingsSubject, []byte(u)); err != nil {
				return err
			}
		}
		return nc.FlushTimeout(5 * time.Second)
	}()
	if err != nil {
		fmt.Fprintf(a.env.Stderr, "warning: the workers were not told of the change (%v): they may use the binding they read before for up to 30 s\n", err)
	}
}

func bindingsDelete() *command {
	return &command{
		name: "delete", args: "USERID", nargs: 1,
		summary: "Remove the binding of a campus user number: pushes to the user fail with \"no binding\" (the workers are told at once).",
		run: func(ctx context.Context, a *app, args []string) error {
			st, err := a.open(ctx)
			if err != nil {
				return err
			}
			if err := st.DeleteBinding(ctx, args[0]); errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("user %s has no binding", args[0])
			} else if err != nil {
				return err
			}
			a.tellWorkers(args[0])
			fromFile := slices.ContainsFunc(a.cfg.Bindings, func(b config.Binding) bool { return b.UserID == args[0] })
			a.out(map[string]any{"userid": args[0], "deleted": true}, func(w io.Writer) {
				fmt.Fprintf(w, "Deleted the binding of user %s.\n", args[0])
				if fromFile {
					fmt.Fprintln(w, "It is in the configuration file's bindings: remove it there too, or it comes back at the next start.")
				}
			})
			return nil
		},
	}
}

package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/keyword"
	"github.com/campus-it/ucs/pkg/push"
)

// workerConfigFile is the worker configuration a standalone stack writes into its data folder
// (standalone.WorkerConfigFile): the platform account and its templates.
const workerConfigFile = "worker.yaml"

func platformCommand() *command {
	return &command{
		name:    "platform",
		summary: "The official account: its templates against the configured mapping, its custom menu.",
		help: `
These commands talk to the platform with the account of the configuration (platform.api_base,
appid, secret; -config FILE), or of a running standalone stack (its simulator; -data DIR).`,
		sub: []*command{platformTemplates(), platformMenu()},
	}
}

// platformClient returns a client of the configured account, and the configuration.
func (a *app) platformClient() (*platform.Client, *config.Config, error) {
	var cfg *config.Config
	switch {
	case a.config != "":
		c, err := config.Load(a.config)
		if err != nil {
			return nil, nil, err
		}
		cfg = c
	case a.data != "":
		info, err := readStandalone(a.data)
		if err != nil {
			return nil, nil, err
		}
		c, err := config.Load(filepath.Join(a.data, workerConfigFile))
		if err != nil {
			return nil, nil, err
		}
		cfg = c
		cfg.PublicURL = info.BaseURL
	default:
		return nil, nil, usagef("give -config FILE (the service's configuration) or -data DIR (a running standalone stack)")
	}
	cfg.ApplyEnv(a.env.Getenv)
	pl := cfg.Platform
	if pl.APIBase == "" || pl.AppID == "" || pl.Secret == "" {
		return nil, nil, errors.New("platform.api_base, appid and secret are required to reach the account")
	}
	// The platform client's own HTTP client: each call times out after 10 s, as the workers'.
	c, err := platform.New(platform.Config{APIBase: pl.APIBase, AppID: pl.AppID, Secret: pl.Secret, Now: a.env.Now})
	if err != nil {
		return nil, nil, err
	}
	return c, cfg, nil
}

// templateReport is the answer of platform templates.
type templateReport struct {
	Templates []templateLine `json:"templates"`
	// Problems are what would make the platform refuse the configured pushes.
	Problems []string `json:"problems"`
}

type templateLine struct {
	TemplateID string        `json:"templateId"`
	Title      string        `json:"title"`
	Keywords   []keywordLine `json:"keywords"`
	// Types are the push types configured to send through the template.
	Types []string `json:"types,omitempty"`
}

type keywordLine struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // "" if of no known kind
	Rule string `json:"rule,omitempty"`
}

func platformTemplates() *command {
	return &command{
		name: "templates", nargs: 0,
		summary: "List the account's templates and check the configured mapping against them.",
		help: `
Each template of platform.templates must exist in the account, and each keyword a field is
mapped to must exist in it and be of a kind the platform documents. The problems are listed
and the exit code is 1 if there are any.`,
		run: func(ctx context.Context, a *app, _ []string) error {
			c, cfg, err := a.platformClient()
			if err != nil {
				return err
			}
			list, err := c.Templates(ctx)
			if err != nil {
				return err
			}
			r := checkTemplates(list, cfg.Platform.Templates)
			a.out(r, func(w io.Writer) { r.write(w) })
			if len(r.Problems) > 0 {
				if a.json {
					return errReported
				}
				fmt.Fprintf(a.env.Stderr, "%d problems with platform.templates\n", len(r.Problems))
				return errReported
			}
			return nil
		},
	}
}

// checkTemplates lists the account's templates and what is wrong with mapping against them.
func checkTemplates(list []platform.Template, mapping map[string]config.Template) templateReport {
	r := templateReport{Templates: []templateLine{}, Problems: []string{}}
	byID := map[string]platform.Template{}
	for _, t := range list {
		byID[t.TemplateID] = t
		line := templateLine{TemplateID: t.TemplateID, Title: t.Title, Keywords: []keywordLine{}}
		for _, kw := range t.Keywords() {
			kl := keywordLine{Name: kw}
			if k := keyword.Of(kw); k != nil {
				kl.Kind, kl.Rule = k.Name, k.String()
			}
			line.Keywords = append(line.Keywords, kl)
		}
		for typ, m := range mapping {
			if m.TemplateID == t.TemplateID {
				line.Types = append(line.Types, typ)
			}
		}
		slices.Sort(line.Types)
		r.Templates = append(r.Templates, line)
	}
	types := make([]string, 0, len(mapping))
	for t := range mapping {
		types = append(types, t)
	}
	slices.Sort(types)
	for _, typ := range types {
		m := mapping[typ]
		t, ok := byID[m.TemplateID]
		if !ok {
			r.Problems = append(r.Problems, fmt.Sprintf("platform.templates.%s.template_id: %q is not a template of the account", typ, m.TemplateID))
		}
		fields := make([]string, 0, len(m.Fields))
		for f := range m.Fields {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		for _, f := range fields {
			kw := m.Fields[f]
			if keyword.Of(kw) == nil {
				r.Problems = append(r.Problems, fmt.Sprintf("platform.templates.%s.fields.%s: %s", typ, f, push.UnknownKeyword(kw)))
			}
			if ok && !slices.Contains(t.Keywords(), kw) {
				r.Problems = append(r.Problems, fmt.Sprintf("platform.templates.%s.fields.%s: template %s has no keyword %q (it has %s)",
					typ, f, m.TemplateID, kw, strings.Join(t.Keywords(), ", ")))
			}
		}
	}
	return r
}

func (r templateReport) write(w io.Writer) {
	for _, t := range r.Templates {
		types := "not configured"
		if len(t.Types) > 0 {
			types = "for " + strings.Join(t.Types, ", ")
		}
		fmt.Fprintf(w, "%s  %s  (%s)\n", t.TemplateID, t.Title, types)
		for _, k := range t.Keywords {
			rule := "of no known kind"
			if k.Kind != "" {
				rule = k.Rule
			}
			fmt.Fprintf(w, "  %-22s %s\n", k.Name, rule)
		}
	}
	if len(r.Templates) == 0 {
		fmt.Fprintln(w, "The account has no templates.")
	}
	for _, p := range r.Problems {
		fmt.Fprintln(w, "problem:", p)
	}
}

func platformMenu() *command {
	return &command{
		name:    "menu",
		summary: "Read and write the account's custom menu.",
		help: `
Turning on the server URL (the callback) disables the menu editor of the platform's console: the
custom menu can then be set only through its API, which these commands call.`,
		sub: []*command{platformMenuShow(), platformMenuSet()},
	}
}

func platformMenuShow() *command {
	return &command{
		name: "show", nargs: 0,
		summary: "Print the account's custom menu (JSON, as the platform answers it).",
		run: func(ctx context.Context, a *app, _ []string) error {
			c, _, err := a.platformClient()
			if err != nil {
				return err
			}
			m, err := c.Menu(ctx)
			if errors.Is(err, platform.ErrNoMenu) {
				a.out(map[string]any{"menu": nil}, func(w io.Writer) { fmt.Fprintln(w, "The account has no custom menu.") })
				return nil
			}
			if err != nil {
				return err
			}
			var buf bytes.Buffer
			_ = json.Indent(&buf, m, "", "  ")
			if a.json {
				fmt.Fprintf(a.env.Stdout, "{\"menu\": %s}\n", m)
				return nil
			}
			fmt.Fprintln(a.env.Stdout, buf.String())
			return nil
		},
	}
}

func platformMenuSet() *command {
	var (
		file string
		bind bool
	)
	return &command{
		name: "set", nargs: 0,
		summary: "Replace the account's custom menu: from -file FILE, or -bind for one button that opens the binding page.",
		help: `
-file FILE is the menu as the platform's menu/create takes it: {"button": […]} ("-" reads
standard input). -bind sets one button, 绑定学号, that opens PUBLIC_URL/bind, the page where
a student binds their campus account to the official account.`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&file, "file", "", "the menu, JSON as menu/create takes it; - for standard input")
			fs.BoolVar(&bind, "bind", false, "one button that opens the binding page (public_url + /bind)")
		},
		run: func(ctx context.Context, a *app, _ []string) error {
			if (file == "") == !bind {
				return usagef("give exactly one of -file FILE and -bind")
			}
			c, cfg, err := a.platformClient()
			if err != nil {
				return err
			}
			var menu json.RawMessage
			if bind {
				if cfg.PublicURL == "" {
					return errors.New("public_url is not set: the binding page's address is public_url + /bind")
				}
				menu = platform.BindMenu(strings.TrimRight(cfg.PublicURL, "/") + "/bind")
			} else {
				var b []byte
				if file == "-" {
					b, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
				} else {
					b, err = os.ReadFile(file)
				}
				if err != nil {
					return err
				}
				if !json.Valid(b) {
					return fmt.Errorf("%s: not JSON", file)
				}
				menu = b
			}
			if err := c.SetMenu(ctx, menu); err != nil {
				return err
			}
			a.out(map[string]any{"menu": menu}, func(w io.Writer) { fmt.Fprintln(w, "Menu set.") })
			return nil
		},
	}
}

package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"time"
)

// codeMenuNotExist is the platform's answer to menu/get for an account without a custom menu.
const codeMenuNotExist = 46003

// ErrNoMenu is returned by Menu for an account without a custom menu.
var ErrNoMenu = errors.New("the account has no custom menu")

// Template is one of the account's templates, as template/get_all_private_template lists it.
type Template struct {
	TemplateID      string `json:"template_id"`
	Title           string `json:"title"`
	PrimaryIndustry string `json:"primary_industry"`
	DeputyIndustry  string `json:"deputy_industry"`
	// Content is the template's text, each keyword written {{name.DATA}}.
	Content string `json:"content"`
	Example string `json:"example"`
}

var keywordRef = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\.DATA\s*\}\}`)

// Keywords returns the names of the template's keywords, in the order of its content.
func (t Template) Keywords() []string {
	var out []string
	for _, m := range keywordRef.FindAllStringSubmatch(t.Content, -1) {
		out = append(out, m[1])
	}
	return out
}

// Templates lists the account's templates.
func (c *Client) Templates(ctx context.Context) ([]Template, error) {
	var a struct {
		ErrCode      int        `json:"errcode"`
		ErrMsg       string     `json:"errmsg"`
		TemplateList []Template `json:"template_list"`
	}
	if err := c.call(ctx, http.MethodGet, "/cgi-bin/template/get_all_private_template", nil, &a); err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	if a.ErrCode != 0 {
		return nil, fmt.Errorf("list templates: %w", &Error{Code: a.ErrCode, Msg: a.ErrMsg})
	}
	return a.TemplateList, nil
}

// Menu returns the account's custom menu as menu/get answers it ({"button": […]}), or
// ErrNoMenu.
func (c *Client) Menu(ctx context.Context) (json.RawMessage, error) {
	var a struct {
		ErrCode int             `json:"errcode"`
		ErrMsg  string          `json:"errmsg"`
		Menu    json.RawMessage `json:"menu"`
	}
	if err := c.call(ctx, http.MethodGet, "/cgi-bin/menu/get", nil, &a); err != nil {
		return nil, fmt.Errorf("read the menu: %w", err)
	}
	switch {
	case a.ErrCode == codeMenuNotExist:
		return nil, ErrNoMenu
	case a.ErrCode != 0:
		return nil, fmt.Errorf("read the menu: %w", &Error{Code: a.ErrCode, Msg: a.ErrMsg})
	}
	return a.Menu, nil
}

// SetMenu replaces the account's custom menu with menu ({"button": […]}, as menu/create
// takes it).
func (c *Client) SetMenu(ctx context.Context, menu json.RawMessage) error {
	var a struct {
		ErrCode int    `json:"errcode"`
		ErrMsg  string `json:"errmsg"`
	}
	if err := c.call(ctx, http.MethodPost, "/cgi-bin/menu/create", menu, &a); err != nil {
		return fmt.Errorf("set the menu: %w", err)
	}
	if a.ErrCode != 0 {
		return fmt.Errorf("set the menu: %w", &Error{Code: a.ErrCode, Msg: a.ErrMsg})
	}
	return nil
}

// BindMenu is a custom menu of one button, 绑定学号 (bind your student number), that opens
// the binding page at bindURL.
func BindMenu(bindURL string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"button": []map[string]string{{"type": "view", "name": "绑定学号", "url": bindURL}}})
	return b
}

// call makes one call of an account endpoint with the access token and decodes its answer
// into v; a rejected token is fetched again and the call made again, as SendTemplate does.
func (c *Client) call(ctx context.Context, method, path string, body []byte, v any) error {
	target := c.base + path
	tok, err := c.tokens.get(ctx, "", time.Time{})
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		sentAt := c.tokens.now()
		raw, err := c.do(ctx, method, target+"?access_token="+url.QueryEscape(tok), target, body, maxAccountAnswerBytes)
		if err != nil {
			return err
		}
		var code struct {
			ErrCode int `json:"errcode"`
		}
		if err := json.Unmarshal(raw, &code); err != nil {
			return unparsable(err)
		}
		if attempt < maxTokenResends && isTokenCode(code.ErrCode) {
			if tok, err = c.tokens.get(ctx, tok, sentAt); err != nil {
				return err
			}
			continue
		}
		if err := json.Unmarshal(raw, v); err != nil {
			return unparsable(err)
		}
		return nil
	}
}

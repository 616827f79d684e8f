package platform

import (
	"bytes"
	"encoding/json"
)

// sendBody is the JSON body of the template send endpoint:
//
//	{"touser":…,"template_id":…,"url":…,"client_msg_id":…,"data":{"thing1":{"value":…}}}
type sendBody struct {
	ToUser      string                  `json:"touser"`
	TemplateID  string                  `json:"template_id"`
	URL         string                  `json:"url,omitempty"`
	ClientMsgID string                  `json:"client_msg_id,omitempty"`
	Data        map[string]keywordValue `json:"data"`
}

type keywordValue struct {
	Value string `json:"value"`
}

// appendSendBody appends the JSON body of the template send endpoint for m. URLs are left
// unescaped (no \u0026 for &), as the platform's own examples write them.
func appendSendBody(b []byte, m *TemplateMessage) []byte {
	body := sendBody{ToUser: m.ToUser, TemplateID: m.TemplateID, URL: m.URL, ClientMsgID: m.ClientMsgID,
		Data: make(map[string]keywordValue, len(m.Data))}
	for k, v := range m.Data {
		body.Data[k] = keywordValue{Value: v}
	}
	buf := bytes.NewBuffer(b)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	// Encoding strings and string maps cannot fail.
	_ = enc.Encode(body)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
